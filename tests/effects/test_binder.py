"""The binder writes the pure status document as a guarded merge patch and sorts failures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from kubernetes.client import Configuration
from returns.result import Failure

from kruntimes.effects.binder import Binder, classify
from kruntimes.effects.kube import ApiError, ErrorKind, Kube
from kruntimes.pure.readers.kube import decode_run
from kruntimes.pure.model.objects import Run
from kruntimes.pure.status import bind_status
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


def binder_for(server: Running) -> Binder:
    return Binder(Kube(Configuration(host=server.url), request_timeout=10))


def test_bind_patches_the_status_subresource_carrying_the_observed_version(stub: Running) -> None:
    stub.stub.route("PATCH", PATH, Reply(body={"metadata": {"name": "r1", "resourceVersion": "42"}}))
    run = pending_run()
    written = binder_for(stub).write(run, bind_status(run, "pod-a", "uid-a", NOW)).unwrap()
    assert written.resource_version == "42"
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
    run = pending_run()
    outcome = binder_for(stub).write(run, bind_status(run, "pod-a", "uid-a", NOW))
    assert isinstance(outcome, Failure)
    assert outcome.failure().kind == "conflict"


def test_a_deleted_run_is_not_found(stub: Running) -> None:
    run = pending_run()
    outcome = binder_for(stub).write(run, bind_status(run, "pod-a", "uid-a", NOW))
    assert outcome.failure().kind == "not_found"


def test_throttling_is_retriable_and_keeps_the_servers_retry_after(stub: Running) -> None:
    stub.stub.route("PATCH", PATH, Reply(429, {"code": 429, "reason": "TooManyRequests"}, headers=(("Retry-After", "2"),)))
    run = pending_run()
    failure = binder_for(stub).write(run, bind_status(run, "pod-a", "uid-a", NOW)).failure()
    assert (failure.kind, failure.retry_after) == ("retriable", 2.0)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("conflict", "conflict"),
        ("not_found", "not_found"),
        ("server", "retriable"),
        ("timeout", "retriable"),
        ("transport", "retriable"),
        ("throttled", "retriable"),
        ("invalid", "permanent"),
        ("forbidden", "permanent"),
        ("unauthorized", "permanent"),
    ],
)
def test_each_api_error_maps_to_one_write_failure(kind: ErrorKind, expected: str) -> None:
    assert classify(ApiError(kind, 0, "", "")) == expected
