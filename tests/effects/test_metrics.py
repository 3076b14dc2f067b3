"""SPEC §9 metrics on a private registry, served with health probes on one port."""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import Configuration
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from kruntimes.kubeclient.kube import Kube
from kruntimes.effects.metrics import MetricsServer, Probes, SchedulerMetrics, serve
from kruntimes.effects.runner import Scheduler
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from tests.pure.example_plugin import WITH_AVOID_DRAINING

SPEC_METRICS = {
    "kruntimes_scheduler_sync": ("counter", {("result",)}),
    "kruntimes_scheduler_sync_duration_seconds": ("histogram", set()),
    "kruntimes_scheduler_no_pods": ("counter", {()}),
    "kruntimes_scheduler_run_queue_duration_seconds": ("histogram", set()),
    "kruntimes_scheduler_filter_rejections": ("counter", {("plugin", "reason")}),
    "kruntimes_scheduler_reservation_conflicts": ("counter", {("stage",)}),
    "kruntimes_scheduler_pending_run_wakeups": ("counter", {("source",)}),
}


OPERATOR_METRICS = {
    "workqueue_adds": ("counter", {("name",)}),
    "workqueue_retries": ("counter", {("name",)}),
    "workqueue_depth": ("gauge", {("name",)}),
    "workqueue_queue_duration_seconds": ("histogram", {("name",)}),
    "workqueue_work_duration_seconds": ("histogram", {("name",)}),
    "kruntimes_scheduler_waiting_runs": ("gauge", {("reason",)}),
    "kruntimes_scheduler_oldest_waiting_run_seconds": ("gauge", {("reason",)}),
    "kruntimes_scheduler_leader": ("gauge", {()}),
    "kruntimes_scheduler_cycle_outcomes": ("counter", {("outcome",)}),
    "kruntimes_scheduler_api_requests": ("counter", {("code", "verb")}),
    "kruntimes_scheduler_api_request_duration_seconds": ("histogram", {("verb",)}),
    "kruntimes_scheduler_bind_confirm_failures": ("counter", {("kind",)}),
    "kruntimes_scheduler_event_writes": ("counter", {("result",)}),
    "kruntimes_scheduler_informer_relists": ("counter", {("kind",)}),
    "kruntimes_scheduler_informer_watch_restarts": ("counter", {("kind",)}),
    "kruntimes_scheduler_shard_members": ("gauge", {()}),
    "kruntimes_scheduler_shard_namespaces": ("gauge", {("state",)}),
    "kruntimes_scheduler_shard_handoffs": ("counter", {("kind",)}),
    "kruntimes_scheduler_skipped_objects": ("counter", {("stage", "thread")}),
    "kruntimes_scheduler_server_resets": ("counter", {("reason",)}),
    "kruntimes_scheduler_http_dropped_connections": ("counter", {("reason",)}),
    "kruntimes_build_info": ("gauge", {("version",)}),
}
"""What operators alert on beyond SPEC §9 (docs/operations.md, "Metrics and alerts")."""
RUNTIME_PREFIXES = ("process_", "python_")
"""prometheus-client's process, platform and GC collectors, on the scheduler's registry."""


def scrape_text(metrics: SchedulerMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


def test_every_spec_metric_is_exposed_with_its_type_and_labels() -> None:
    families = {f.name: f for f in text_string_to_metric_families(scrape_text(SchedulerMetrics()))}
    ours = {name for name in families if not name.startswith(RUNTIME_PREFIXES)}
    assert ours == set(SPEC_METRICS) | set(OPERATOR_METRICS)
    assert {"process_resident_memory_bytes", "process_cpu_seconds", "python_gc_collections"} <= set(families)
    for name, (kind, label_sets) in SPEC_METRICS.items():
        family = families[name]
        assert family.type == kind
        if kind == "counter":
            totals = [s for s in family.samples if s.name.endswith("_total")]
            assert {tuple(sorted(s.labels)) for s in totals} == label_sets


def test_every_operator_metric_is_exposed_with_its_type_and_labels() -> None:
    families = {f.name: f for f in text_string_to_metric_families(scrape_text(SchedulerMetrics()))}
    for name, (kind, label_sets) in OPERATOR_METRICS.items():
        family = families[name]
        assert family.type == kind, name
        sample_name = name + {"counter": "_total", "histogram": "_count"}.get(kind, "")
        samples = [s for s in family.samples if s.name == sample_name]
        assert samples, name
        assert {tuple(sorted(k for k in s.labels if k != "le")) for s in samples} == label_sets, name


def test_closed_label_values_are_pre_initialised_at_zero() -> None:
    metrics = SchedulerMetrics()
    for result in ("scheduled", "no_pods", "selection_error"):
        assert metrics.value("kruntimes_scheduler_sync_total", {"result": result}) == 0
    for stage in ("reserve", "bind"):
        assert metrics.value("kruntimes_scheduler_reservation_conflicts_total", {"stage": stage}) == 0
    for source in ("runtime_pod", "capacity_released"):
        assert metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": source}) == 0
    labels = {"plugin": "RunAffinity", "reason": "UnsatisfiedRunAntiAffinity"}
    assert metrics.value("kruntimes_scheduler_filter_rejections_total", labels) == 0


def test_counts_and_observations_land_on_the_right_series() -> None:
    metrics = SchedulerMetrics()
    metrics.count_sync("scheduled")
    metrics.count_no_pods()
    metrics.count_conflict("bind")
    metrics.count_wakeups("capacity_released", 3)
    metrics.observe_sync_duration(0.002)
    metrics.observe_queue_duration(12.0)
    metrics.count_rejections((("RuntimePodAvailability", "RuntimePodUnavailable", 4),))
    assert metrics.value("kruntimes_scheduler_sync_total", {"result": "scheduled"}) == 1
    assert metrics.value("kruntimes_scheduler_no_pods_total") == 1
    assert metrics.value("kruntimes_scheduler_reservation_conflicts_total", {"stage": "bind"}) == 1
    assert metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "capacity_released"}) == 3
    assert metrics.value("kruntimes_scheduler_sync_duration_seconds_count") == 1
    assert metrics.value("kruntimes_scheduler_run_queue_duration_seconds_sum") == 12.0
    labels = {"plugin": "RuntimePodAvailability", "reason": "RuntimePodUnavailable"}
    assert metrics.value("kruntimes_scheduler_filter_rejections_total", labels) == 4


def rejection_series(metrics: SchedulerMetrics) -> dict[tuple[str, str], float]:
    """Every ``filter_rejections_total`` sample in the registry, as a scrape would show it."""
    return {
        (sample.labels["plugin"], sample.labels["reason"]): sample.value
        for family in metrics.registry.collect()
        if family.name == "kruntimes_scheduler_filter_rejections"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


DEFAULT_PAIRS = {
    ("RuntimePodAvailability", "RuntimePodUnavailable"),
    ("RunAffinity", "UnsatisfiedRunAffinity"),
    ("RunAffinity", "UnsatisfiedRunAntiAffinity"),
    ("WorkspacePlacement", "WorkspacePlacement"),
    ("WorkspacePlacement", "WorkspaceUnavailable"),
}


def test_the_rejection_series_are_exactly_the_default_plugins_declared_pairs_at_zero() -> None:
    assert rejection_series(SchedulerMetrics()) == {pair: 0.0 for pair in DEFAULT_PAIRS}
    assert rejection_series(SchedulerMetrics(DEFAULT_REGISTRY)) == {pair: 0.0 for pair in DEFAULT_PAIRS}


def test_a_registered_plugins_reason_is_a_rejection_series_from_start_up() -> None:
    metrics = SchedulerMetrics(WITH_AVOID_DRAINING)
    assert rejection_series(metrics) == {pair: 0.0 for pair in DEFAULT_PAIRS | {("AvoidDraining", "PodDraining")}}
    assert 'kruntimes_scheduler_filter_rejections_total{plugin="AvoidDraining",reason="PodDraining"} 0.0' in scrape_text(
        metrics
    )
    metrics.count_rejections((("AvoidDraining", "PodDraining", 3), ("RuntimePodAvailability", "RuntimePodUnavailable", 1)))
    assert metrics.value("kruntimes_scheduler_filter_rejections_total", {"plugin": "AvoidDraining", "reason": "PodDraining"}) == 3
    assert metrics.undeclared_rejections == 0


def test_a_scheduler_counts_rejections_under_the_labels_of_the_registry_it_runs() -> None:
    kube = Kube(Configuration(host="http://127.0.0.1:9"))  # the schedulers are built, never started: no request
    try:
        extended = Scheduler(kube, registry=WITH_AVOID_DRAINING).metrics
        default = Scheduler(kube).metrics
    finally:
        kube.close()
    assert set(rejection_series(extended)) == DEFAULT_PAIRS | {("AvoidDraining", "PodDraining")}
    assert set(rejection_series(default)) == DEFAULT_PAIRS


def test_a_rejection_outside_the_declared_pairs_is_logged_and_set_aside_never_a_label(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = SchedulerMetrics()
    with caplog.at_level(logging.ERROR, logger="kruntimes.effects.metrics"):
        metrics.count_rejections(
            (
                ("AvoidDraining", "PodDraining", 2),  # a plugin this registry does not hold
                ("RunAffinity", "pod-xyz", 1),  # a reason its plugin did not declare
                ("RunAffinity", "UnsatisfiedRunAffinity", 4),
            )
        )
    assert metrics.undeclared_rejections == 3
    assert rejection_series(metrics) == {
        pair: (4.0 if pair == ("RunAffinity", "UnsatisfiedRunAffinity") else 0.0) for pair in DEFAULT_PAIRS
    }
    text = scrape_text(metrics)
    assert "AvoidDraining" not in text and "pod-xyz" not in text and 'plugin="other"' not in text
    logged = [(r.levelno, getattr(r, "plugin", None), getattr(r, "reason", None)) for r in caplog.records]
    assert logged == [(logging.ERROR, "AvoidDraining", "PodDraining"), (logging.ERROR, "RunAffinity", "pod-xyz")]


def test_two_instances_do_not_clash_and_leave_the_global_registry_alone() -> None:
    first, second = SchedulerMetrics(), SchedulerMetrics()
    first.count_no_pods()
    assert second.value("kruntimes_scheduler_no_pods_total") == 0
    assert REGISTRY.get_sample_value("kruntimes_scheduler_no_pods_total") is None


class Readiness:
    def __init__(self) -> None:
        self.ready = False

    def __call__(self) -> bool:
        return self.ready


@pytest.fixture()
def served() -> Iterator[tuple[MetricsServer, SchedulerMetrics, Readiness]]:
    metrics = SchedulerMetrics()
    readiness = Readiness()
    server = serve(metrics.registry, Probes(ready=readiness), host="127.0.0.1", port=0)
    try:
        yield server, metrics, readiness
    finally:
        server.close()


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_port_serves_metrics_health_and_readiness(
    served: tuple[MetricsServer, SchedulerMetrics, Readiness],
) -> None:
    server, metrics, readiness = served
    metrics.count_sync("no_pods")
    status, body = fetch(server.url + "/metrics")
    assert status == 200
    assert 'kruntimes_scheduler_sync_total{result="no_pods"} 1.0' in body
    assert fetch(server.url + "/healthz") == (200, "ok\n")
    assert fetch(server.url + "/readyz")[0] == 503
    readiness.ready = True
    assert fetch(server.url + "/readyz") == (200, "ok\n")


def _wakeups(thread: threading.Thread) -> int:
    """Voluntary context switches of one thread so far (Linux): each time it slept and woke."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("voluntary_ctxt_switches")))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_an_idle_port_sleeps_until_a_request_or_close() -> None:
    """Every replica serves this port; one that wakes on a timer pays for it all day."""
    running = set(threading.enumerate())
    server = serve(SchedulerMetrics().registry, Probes(ready=lambda: True), host="127.0.0.1", port=0)
    [thread] = [t for t in threading.enumerate() if t not in running and t.name == "metrics-http"]
    assert fetch(server.url + "/healthz")[0] == 200
    time.sleep(0.1)  # the request's own wake-ups are over
    before = _wakeups(thread)
    time.sleep(0.6)  # polling every 0.1 s (serve_forever's way) would wake six times
    assert _wakeups(thread) - before <= 1
    server.close()
    assert not thread.is_alive()


def test_the_port_exposes_nothing_else(served: tuple[MetricsServer, SchedulerMetrics, Readiness]) -> None:
    server, _, _ = served
    for path in ("/", "/debug/pprof", "/metrics/extra", "/healthz/../etc/passwd"):
        assert fetch(server.url + path)[0] == 404


def test_a_probe_that_raises_answers_unavailable() -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    server = serve(SchedulerMetrics().registry, Probes(ready=broken), host="127.0.0.1", port=0)
    try:
        assert fetch(server.url + "/readyz")[0] == 503
    finally:
        server.close()
