"""The operator metrics beyond SPEC §9: queue, leadership, cycle outcomes, API requests, Events, informers."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pytest
from kubernetes.client import Configuration
from returns.result import Failure, Result

from kruntimes.effects.events import RunEvents
from kruntimes.kubeclient.kube import MERGE_PATCH, ApiError, JSONObject, Kube
from kruntimes.effects.metrics import SchedulerMetrics, code_class, package_version, verb_of
from tests.effects.fakes import FakeClock
from tests.effects.stubserver import Reply, Running, StubServer, running
from tests.effects.test_controller_parts import _run
from tests.effects.test_informer import bookmark, error, harness, listing, run_json
from kruntimes.pure.model.objects import RunKey
from tests.effects.test_scheduling_queue import Harness, backlog
from tests.builders import NOW, active_run, at, decoded_pod, decoded_run

FORBIDDEN = ApiError("forbidden", 403, "Forbidden", "events is forbidden")


@dataclass
class RefusingEvents:
    """An Events API that answers every write 403 (RBAC without the events rule)."""

    calls: list[str] = field(default_factory=list)

    def create(self, path: str, body: Mapping[str, object], *, read: bool = True) -> Result[JSONObject, ApiError]:
        self.calls.append(path)
        return Failure(FORBIDDEN)

    def patch(
        self, path: str, body: str | bytes, content_type: str = MERGE_PATCH, *, read: bool = True
    ) -> Result[JSONObject, ApiError]:
        self.calls.append(path)
        return Failure(FORBIDDEN)


def _drain(recorder: RunEvents) -> None:
    recorder.start()
    try:
        assert recorder.flush(5)
    finally:
        recorder.stop()


def _event_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "kruntimes.kubeclient.events" and r.levelno == logging.WARNING]


def test_refused_event_writes_are_counted_and_warned_about_once_a_minute_per_kind_of_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, kube, metrics = FakeClock(), RefusingEvents(), SchedulerMetrics()
    recorder = RunEvents(kube, clock=clock)
    metrics.watch_events(recorder)
    for i in range(3):
        recorder.scheduled(_run(f"r{i}"), "pod-0")
    with caplog.at_level(logging.DEBUG, logger="kruntimes.kubeclient.events"):
        _drain(recorder)
        assert len(kube.calls) == 3
        assert metrics.value("kruntimes_scheduler_event_writes_total", {"result": "failed"}) == 3
        assert metrics.value("kruntimes_scheduler_event_writes_total", {"result": "written"}) == 0
        warned = _event_warnings(caplog)
        assert len(warned) == 1 and getattr(warned[0], "kind") == "forbidden"
        clock.advance(61)
        recorder.scheduled(_run("later"), "pod-0")
        _drain(recorder)
    assert len(_event_warnings(caplog)) == 2
    assert metrics.value("kruntimes_scheduler_event_writes_total", {"result": "failed"}) == 4


def test_events_refused_by_the_write_gate_are_counted_as_fenced_not_failed() -> None:
    metrics = SchedulerMetrics()
    recorder = RunEvents(RefusingEvents(), may_write=lambda namespace: False)
    metrics.watch_events(recorder)
    recorder.scheduled(_run(), "pod-0")
    assert metrics.value("kruntimes_scheduler_event_writes_total", {"result": "fenced"}) == 1
    assert metrics.value("kruntimes_scheduler_event_writes_total", {"result": "failed"}) == 0


def test_queue_depth_and_waiting_runs_follow_the_current_terms_queue() -> None:
    harness = backlog(20, slots=2)
    metrics = harness.metrics
    metrics.watch_queue(harness.queue)
    harness.queue.activate_pending()
    assert metrics.value("workqueue_depth", {"name": "runs"}) == 2
    assert metrics.value("kruntimes_scheduler_waiting_runs", {"reason": "capacity"}) == 18
    assert metrics.value("kruntimes_scheduler_waiting_runs", {"reason": "unfit"}) == 0
    assert metrics.value("workqueue_adds_total", {"name": "runs"}) == 2
    harness.clock.advance(3.0)
    key = harness.take()
    assert key is not None
    assert metrics.value("workqueue_depth", {"name": "runs"}) == 1
    assert metrics.value("workqueue_queue_duration_seconds_sum", {"name": "runs"}) == 3.0
    harness.clock.advance(0.5)
    harness.finish(key, harness.decide(key))
    assert metrics.value("workqueue_work_duration_seconds_count", {"name": "runs"}) == 1
    assert metrics.value("workqueue_work_duration_seconds_sum", {"name": "runs"}) == 0.5
    metrics.watch_queue(None)  # the term ended
    assert metrics.value("workqueue_depth", {"name": "runs"}) == 0
    assert metrics.value("kruntimes_scheduler_waiting_runs", {"reason": "capacity"}) == 0


def test_a_key_backed_off_counts_as_a_retry() -> None:
    harness = backlog(1)
    harness.queue.activate_pending()
    key = harness.take()
    assert key is not None
    harness.queue.work.add_rate_limited(key)
    assert harness.metrics.value("workqueue_retries_total", {"name": "runs"}) == 1


def test_the_leader_gauge_reads_the_write_gate_at_scrape_time() -> None:
    metrics, leading = SchedulerMetrics(), [False]
    metrics.watch_leader(lambda: leading[0])
    assert metrics.value("kruntimes_scheduler_leader") == 0
    leading[0] = True
    assert metrics.value("kruntimes_scheduler_leader") == 1


def test_every_cycle_outcome_is_a_series_from_start_up_and_counts_land_on_it() -> None:
    metrics = SchedulerMetrics()
    assert metrics.value("kruntimes_scheduler_cycle_outcomes_total", {"outcome": "write_failed"}) == 0
    assert metrics.value("kruntimes_scheduler_cycle_outcomes_total", {"outcome": "not_leader"}) == 0
    metrics.count_outcome("write_failed")
    assert metrics.value("kruntimes_scheduler_cycle_outcomes_total", {"outcome": "write_failed"}) == 1
    assert metrics.value("kruntimes_scheduler_cycle_outcomes_total", {"outcome": "scheduled"}) == 0


def test_api_status_codes_and_methods_fold_into_closed_classes() -> None:
    assert [code_class(s) for s in (200, 201, 304, 403, 404, 500, 504, 0, 999)] == [
        "2xx", "2xx", "3xx", "4xx", "4xx", "5xx", "5xx", "none", "other",
    ]
    assert [verb_of(m) for m in ("get", "PATCH", "BREW")] == ["GET", "PATCH", "other"]


@pytest.fixture()
def stub() -> Iterator[Running]:
    yield from running(StubServer())


def test_a_kube_client_reports_each_request_to_its_observer(stub: Running) -> None:
    stub.stub.route("PATCH", "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/r/status", Reply(403, {"kind": "Status", "code": 403, "reason": "Forbidden"}))
    stub.stub.route("GET", "/api/v1/namespaces/ns/pods/p", Reply(200, {"kind": "Pod"}))
    metrics = SchedulerMetrics()
    kube = Kube(Configuration(host=stub.url), request_timeout=10)
    kube.observe(metrics.observe_request)
    assert isinstance(kube.patch_status("/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/r", "{}"), Failure)
    kube.get("/api/v1/namespaces/ns/pods/p")
    assert metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "PATCH", "code": "4xx"}) == 1
    assert metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "GET", "code": "2xx"}) == 1
    assert metrics.value("kruntimes_scheduler_api_request_duration_seconds_count", {"verb": "PATCH"}) == 1
    kube.observe(None)
    kube.get("/api/v1/namespaces/ns/pods/p")
    assert metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "GET", "code": "2xx"}) == 1


def test_an_unanswered_request_is_counted_under_none() -> None:
    metrics = SchedulerMetrics()
    kube = Kube(Configuration(host="http://127.0.0.1:9"), request_timeout=2)
    kube.observe(metrics.observe_request)
    kube.get("/api/v1/pods")
    assert metrics.value("kruntimes_scheduler_api_requests_total", {"verb": "GET", "code": "none"}) == 1


def test_build_info_is_one_for_the_installed_version() -> None:
    version = package_version()
    assert version not in ("", "unknown")
    assert SchedulerMetrics().value("kruntimes_build_info", {"version": version}) == 1


def test_process_and_gc_metrics_are_on_the_schedulers_own_registry() -> None:
    metrics = SchedulerMetrics()
    assert (metrics.value("process_resident_memory_bytes") or 0) > 0
    assert metrics.value("process_cpu_seconds_total") is not None
    assert metrics.value("python_gc_collections_total", {"generation": "0"}) is not None


def test_informer_relists_and_watch_restarts_are_counted_by_kind() -> None:
    h = harness(
        [listing(run_json("a", "1"), rv="5"), listing(run_json("a", "7"), rv="9")],
        [[bookmark("6")], [error("gone", 410)]],
    )
    h.run()
    metrics = SchedulerMetrics()
    metrics.watch_informers([h.informer])
    assert metrics.value("kruntimes_scheduler_informer_relists_total", {"kind": "runs"}) == 1
    # the watch that ended, the one answered 410, and the last one the script ends
    assert metrics.value("kruntimes_scheduler_informer_watch_restarts_total", {"kind": "runs"}) == h.informer.watch_restarts == 3
    assert metrics.value("kruntimes_scheduler_informer_relists_total", {"kind": "pods"}) == 0


def _oldest(metrics: SchedulerMetrics) -> dict[str, float | None]:
    return {
        reason: metrics.value("kruntimes_scheduler_oldest_waiting_run_seconds", {"reason": reason})
        for reason in ("capacity", "constraints", "unfit", "queued")
    }


def test_the_oldest_waiting_run_is_aged_by_how_it_waits_however_long_it_never_binds() -> None:
    """The alert's gauge: a Run parked for room, one too big for any pod, and one queued each
    show their age since creation, and keep ageing while nothing can place them."""
    pod = decoded_pod("a", capacity={"runs": "1"})
    harness = Harness(
        pod,
        active_run("holder", "a"),
        decoded_run("queued-for-room", created=at(-600)),
        decoded_run("too-big", created=at(-900), requests={"runs": "5"}),
    )
    wall = [NOW.timestamp()]
    metrics = SchedulerMetrics(wall=lambda: wall[0])
    metrics.watch_queue(harness.queue)
    assert _oldest(metrics) == {"capacity": 0, "constraints": 0, "unfit": 0, "queued": 0}
    harness.queue.activate_pending()  # a new leader parks its backlog unplanned, as waiting for room
    assert _oldest(metrics) == {"capacity": 900, "constraints": 0, "unfit": 0, "queued": 0}
    harness.queue.activate([RunKey("default", "too-big"), RunKey("default", "queued-for-room")])
    assert _oldest(metrics)["queued"] == 900  # ready for a worker
    key = harness.take()
    assert key is not None and key.name == "too-big"
    assert _oldest(metrics)["queued"] == 900  # being planned
    harness.finish(key, harness.decide(key))  # no pod could hold it even empty
    wall[0] += 3600  # an hour later nothing changed: no event will place it
    assert _oldest(metrics) == {"capacity": 0, "constraints": 0, "unfit": 4500, "queued": 4200}
    metrics.watch_queue(None)  # a standby schedules nothing
    assert _oldest(metrics) == {"capacity": 0, "constraints": 0, "unfit": 0, "queued": 0}
