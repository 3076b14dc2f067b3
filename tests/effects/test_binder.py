"""The binder writes the pure status document as a guarded merge patch and sorts failures."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes.client import Configuration
from returns.result import Failure

from kruntimes.effects.binder import Binder, write_outcome
from kruntimes.kubeclient.kube import ApiError, ErrorKind, Kube
from kruntimes.pure.readers.kube import decode_run
from kruntimes.pure.model.objects import Run
from kruntimes.pure.status import bind_status
from kruntimes.pure.step import Ambiguous, Conflict, Gone, Refused, StatusWrite, WriteOutcome, Written
from tests.effects.stubserver import Reply, Running, StubServer, running

NOW = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
PATH = "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/r1/status"


def pending_run() -> Run:
    raw = {
        "metadata": {"name": "r1", "namespace": "ns", "uid": "u1", "resourceVersion": "41"},
        "spec": {"runtime": "py"},
        "status": {"phase": "Pending", "message": "waiting for available runtime pods for runtime \"py\""},
    }
    return decode_run(raw).unwrap()


@pytest.fixture()
def stub() -> Iterator[Running]:
    yield from running(StubServer())


def binder_for(server: Running, hold: float = 60.0) -> Binder:
    return Binder(Kube(Configuration(host=server.url), request_timeout=10), hold=hold, clock=lambda: NOW)


def bind_write(run: Run) -> StatusWrite:
    return StatusWrite(run, bind_status(run, "pod-a", "uid-a", NOW), "bind")


def test_bind_patches_the_status_subresource_carrying_the_observed_version(stub: Running) -> None:
    stub.stub.route("PATCH", PATH, Reply(body={"metadata": {"name": "r1", "resourceVersion": "42"}}))
    outcome = binder_for(stub).write(bind_write(pending_run()))
    assert outcome == Written("42")
    seen = stub.stub.seen[0]
    assert seen.method == "PATCH"
    assert seen.headers["content-type"] == "application/merge-patch+json"
    body = json.loads(seen.body)
    assert body["metadata"] == {"resourceVersion": "41"}
    assert body["status"]["phase"] == "Scheduled"
    assert body["status"]["assignedPod"] == "pod-a"
    assert body["status"]["message"] is None  # the stale waiting message is cleared


def test_a_concurrent_writer_makes_the_bind_a_conflict(stub: Running) -> None:
    stub.stub.route("PATCH", PATH, Reply(409, {"kind": "Status", "code": 409, "reason": "Conflict"}))
    assert binder_for(stub).write(bind_write(pending_run())) == Conflict()


def test_a_deleted_run_is_gone(stub: Running) -> None:
    assert binder_for(stub).write(bind_write(pending_run())) == Gone()


def test_throttling_is_a_definite_refusal_that_keeps_the_servers_retry_after(stub: Running) -> None:
    stub.stub.route("PATCH", PATH, Reply(429, {"code": 429, "reason": "TooManyRequests"}, headers=(("Retry-After", "2"),)))
    assert binder_for(stub).write(bind_write(pending_run())) == Refused(2.0)


def test_a_server_error_is_ambiguous_until_the_hold_has_passed(stub: Running) -> None:
    stub.stub.route("PATCH", PATH, Reply(503, {"code": 503, "reason": "ServiceUnavailable"}))
    outcome = binder_for(stub, hold=7.5).write(bind_write(pending_run()))
    assert outcome == Ambiguous(NOW + timedelta(seconds=7.5))


def test_a_refused_connection_never_sent_the_write_so_it_is_a_definite_refusal() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    binder = Binder(Kube(Configuration(host=f"http://127.0.0.1:{port}"), request_timeout=2), clock=lambda: NOW)
    assert binder.write(bind_write(pending_run())) == Refused()


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("conflict", Conflict()),
        ("not_found", Gone()),
        ("server", Ambiguous(NOW)),
        ("timeout", Ambiguous(NOW)),
        ("transport", Ambiguous(NOW)),
        ("bad_response", Ambiguous(NOW)),
        ("unreachable", Refused()),
        ("throttled", Refused()),
        ("already_exists", Refused()),
        ("invalid", Refused(permanent=True)),
        ("forbidden", Refused(permanent=True)),
        ("unauthorized", Refused(permanent=True)),
    ],
)
def test_each_api_error_is_one_write_outcome(kind: ErrorKind, expected: WriteOutcome) -> None:
    assert write_outcome(Failure(ApiError(kind, 0, "", "")), NOW) == expected
