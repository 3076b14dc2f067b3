"""Metrics (SPEC §9), probes, and the cycle log that `kruntimes replay` re-plans."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kruntimes.cli import main as cli_main
from kruntimes.effects.cyclelog_writer import CycleLogWriter
from kruntimes.kubeclient.kube import Kube

from tests.operator_metrics import OPERATOR_LABELS, RUNTIME_PREFIXES, base_name
from tests.builders import make_run

from .conftest import SchedulerFactory, Server
from .helpers import ready_pods, assigned, http_get, wait_until, waiting

COUNTERS = {
    "kruntimes_scheduler_sync_total": {"result": {"scheduled", "no_pods", "selection_error"}},
    "kruntimes_scheduler_no_pods_total": {},
    "kruntimes_scheduler_filter_rejections_total": {
        "plugin": {"RuntimePodAvailability", "RunAffinity", "WorkspacePlacement", "other"},
        "reason": {
            "RuntimePodUnavailable",
            "UnsatisfiedRunAffinity",
            "UnsatisfiedRunAntiAffinity",
            "WorkspacePlacement",
            "WorkspaceUnavailable",
            "other",
        },
    },
    "kruntimes_scheduler_reservation_conflicts_total": {"stage": {"reserve", "bind"}},
    "kruntimes_scheduler_pending_run_wakeups_total": {"source": {"runtime_pod", "capacity_released"}},
}
HISTOGRAMS = ("kruntimes_scheduler_sync_duration_seconds", "kruntimes_scheduler_run_queue_duration_seconds")


def _pods(server_kube: Kube) -> int:
    return ready_pods(server_kube)


def test_metrics_expose_exactly_the_spec_families_with_closed_label_values(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory
) -> None:
    server.add_runtime("python", replicas=1, capacity={"runs": "1"})
    wait_until(lambda: _pods(server_kube) == 1, what="pod")
    sched = server_scheduler()
    make_run(server_kube, "m-1")
    wait_until(lambda: assigned(server_kube, "m-1"), what="bind")
    make_run(server_kube, "m-2", labels={"team": "secret-team"})
    wait_until(lambda: waiting(server_kube, "m-2"), what="wait")
    assert sched.metrics_url is not None and sched.health_url is not None
    status, text = http_get(f"{sched.metrics_url}/metrics")
    assert status == 200
    seen: set[str] = set()
    operator: set[str] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(RUNTIME_PREFIXES):
                continue
            if sample.name in COUNTERS:
                base, allowed = sample.name, COUNTERS[sample.name]
            elif base_name(sample.name) in OPERATOR_LABELS or sample.name in OPERATOR_LABELS:
                known = sample.name if sample.name in OPERATOR_LABELS else base_name(sample.name)
                expected = OPERATOR_LABELS[known]
                operator.add(known)
                labels = {k: v for k, v in sample.labels.items() if k != "le"}
                assert set(labels) == set(expected), (sample.name, labels)
                assert all(value in expected[key] for key, value in labels.items()), (sample.name, labels)
                continue
            else:
                base = next((h for h in HISTOGRAMS if sample.name in (f"{h}_bucket", f"{h}_count", f"{h}_sum")), "")
                assert base, f"unexpected series {sample.name}"
                allowed = {}
            seen.add(base)
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            assert set(labels) == set(allowed), (sample.name, labels)
            for key, value in labels.items():
                assert value in allowed[key], (sample.name, key, value)
    assert seen == set(COUNTERS) | set(HISTOGRAMS)
    assert operator == set(OPERATOR_LABELS)
    ours = "\n".join(line for line in text.splitlines() if not line.startswith(("# HELP", "# TYPE")) and not line.startswith(RUNTIME_PREFIXES))
    for forbidden in ("python", "m-1", "m-2", "secret-team", "default"):
        assert forbidden not in ours
    runtime_values = {v for f in text_string_to_metric_families(text) if f.name.startswith(RUNTIME_PREFIXES) for s in f.samples for v in s.labels.values()}
    assert not runtime_values & {"m-1", "m-2", "secret-team", "default"}
    assert sched.metrics.value("kruntimes_scheduler_sync_total", {"result": "scheduled"}) == 1


def test_probes_answer_on_their_own_port(server: Server, server_scheduler: SchedulerFactory) -> None:
    sched = server_scheduler()
    assert sched.metrics_url is not None and sched.health_url is not None
    assert http_get(f"{sched.health_url}/healthz") == (200, "ok\n")
    assert http_get(f"{sched.health_url}/readyz") == (200, "ok\n")
    assert http_get(f"{sched.health_url}/metrics")[0] == 404
    assert http_get(f"{sched.metrics_url}/healthz")[0] == 404


def test_the_schedulers_threads_carry_their_names_in_the_kernel(server: Server, server_scheduler: SchedulerFactory) -> None:
    # what `top -H -p PID` and `ps -L -p PID` show an operator looking for the thread that spends the CPU
    if not Path("/proc/thread-self/comm").exists():
        pytest.skip("no /proc/thread-self on this OS")
    server_scheduler(workers=2)
    expected = {"informer-runs", "informer-pods", "informer-worksp", "worker-1-0", "worker-1-1", "safety-net-1",
                "event-recorder", "metrics-http"}

    def kernel_names() -> set[str]:
        names: set[str] = set()
        for task in Path("/proc/self/task").iterdir():
            try:
                names.add((task / "comm").read_text().strip())
            except OSError:
                pass  # a thread that ended meanwhile
        return names

    wait_until(lambda: expected <= kernel_names(), what=f"threads named {sorted(expected - kernel_names())}")


def test_the_cycle_log_of_a_run_replays_with_every_record_identical(
    server: Server, server_kube: Kube, server_scheduler: SchedulerFactory, tmp_path: Path
) -> None:
    server.add_runtime("python", replicas=2, capacity={"runs": "2"})
    wait_until(lambda: _pods(server_kube) == 2, what="pods")
    log = tmp_path / "decisions.jsonl"
    sched = server_scheduler(cycle_log=log)
    affinity = {"runAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "runAffinityTerm": {"labelSelector": {"matchLabels": {"g": "1"}}, "topologyKey": "kruntimes.io/runtime-pod"}}
    ]}}
    for i in range(6):
        make_run(server_kube, f"c-{i}", labels={"g": "1"}, affinity=affinity)
    wait_until(lambda: sum(1 for i in range(6) if assigned(server_kube, f"c-{i}")) == 4, what="four bound")
    wait_until(lambda: all(assigned(server_kube, f"c-{i}") or waiting(server_kube, f"c-{i}") for i in range(6)), what="decided")
    writer = sched.cycle_log
    assert writer is not None and writer.written >= 6
    assert cli_main(["replay", str(log)]) == 0


def test_the_cycle_log_rotates_and_every_file_replays(tmp_path: Path) -> None:
    path = tmp_path / "cycles.jsonl"
    line = '{"x": "' + "y" * 90 + '"}\n'  # 100 bytes
    writer = CycleLogWriter(path, max_bytes=350, backups=2)
    for _ in range(10):
        writer.write_line(line)
    writer.close()
    files = writer.files()
    assert [f.name for f in files] == ["cycles.jsonl.2", "cycles.jsonl.1", "cycles.jsonl"]
    assert all(f.stat().st_size <= 350 for f in files)
    assert sum(len(f.read_text().splitlines()) for f in files) == 7  # 10 written, the oldest 3 rotated away
    truncating = CycleLogWriter(tmp_path / "only.jsonl", max_bytes=250, backups=0)
    for _ in range(5):
        truncating.write_line(line)
    truncating.close()
    assert truncating.files() == (tmp_path / "only.jsonl",)
    assert (tmp_path / "only.jsonl").stat().st_size == 100
