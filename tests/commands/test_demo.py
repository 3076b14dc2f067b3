"""`kruntimes demo`: the whole path — local API server, the real `kruntimes scheduler` subprocess, a workload.

The end-to-end test runs the demo small (3 pods, 10 Runs of 0.5 s) and reads
its summary as a person would. The smaller tests pin the pure parts (the
workload's shape, percentiles, the summary's checks, metric parsing) and the
failure paths: a scheduler that does not start, and one that never schedules.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from kruntimes.cli import main
from kruntimes.commands._demo_watch import Seen
from kruntimes.commands.demo import (
    DemoOptions,
    metrics_line,
    percentile,
    run_demo,
    summarize,
    workload,
)


def test_the_demo_places_and_finishes_every_run_and_says_how_fast(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code = main(["demo", "--pods", "3", "--runs", "10", "--run-duration", "0.5", "--workers", "2", "--quiet"])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert elapsed < 40
    placements = dict(
        (m.group(1), m.group(2).split()) for m in re.finditer(r"^  (python-\d)  (.+)$", out, flags=re.MULTILINE)
    )
    placed = sorted(name for names in placements.values() for name in names)
    expected = sorted(["cohort-1", "cohort-2", "pair-a", "pair-b"] + [f"batch-{i}" for i in range(1, 7)])
    assert placed == expected, out
    cohort_pods = {pod for pod, names in placements.items() if {"cohort-1", "cohort-2"} & set(names)}
    assert len(cohort_pods) == 1
    pair_pods = {pod for pod, names in placements.items() if {"pair-a", "pair-b"} & set(names)}
    assert len(pair_pods) == 2
    assert f"✓ affinity cohort (2 Runs requiring cohort=lab, seeded by the first): all on {cohort_pods.pop()}" in out
    assert re.search(r"✓ anti-affinity pair \(app=db\): pair-a on python-\d and pair-b on python-\d", out)
    assert re.search(r"✓ 10/10 Runs succeeded in \d+\.\d s", out)
    assert re.search(r"all 10 Runs +p50 +[\d.]+ m?s +p99 +[\d.]+ m?s", out)
    assert re.search(r"throughput: 10 binds in [\d.]+ s = [\d.]+ binds/s", out)
    assert re.search(r"scheduler metrics: 10 scheduled, \d+ no-pod waits", out)
    stray = 'default/stray — waiting for available runtime pods satisfying required Run affinity for runtime "python"'
    assert stray in out
    assert re.search(r"kubectl --kubeconfig \S+kubeconfig get runs", out)
    assert re.search(r"kruntimes explain --kubeconfig \S+ default/stray", out)
    assert "[" not in out.split("placements")[0]  # --quiet: no progress lines
    kubeconfig = re.search(r"kubectl --kubeconfig (\S+) get runs", out)
    assert kubeconfig is not None and not Path(kubeconfig.group(1)).parent.exists()  # nothing left behind


def test_a_scheduler_that_does_not_start_is_reported_with_its_log(capsys: pytest.CaptureFixture[str]) -> None:
    broken = (sys.executable, "-c", "import sys; print('no such flag'); sys.exit(3)")
    code = run_demo(DemoOptions(pods=2, runs=6, quiet=True, scheduler_command=broken))
    _, err = capsys.readouterr()
    assert code == 2
    assert "the scheduler exited with status 3 before it was ready" in err
    assert "no such flag" in err


# A scheduler that reports ready and never schedules anything: it binds the port it is given (the demo
# gives 0) and writes the start-up line the demo reads its addresses from.
_IDLE_SCHEDULER = """
import http.server, sys
address = sys.argv[sys.argv.index("--health-probe-bind-address") + 1]
host, port = address.rsplit(":", 1)
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer((host, int(port)), Ready)
url = f"http://{host}:{server.server_address[1]}"
print(f"2026-01-01T00:00:00.000Z INFO  idle: scheduler started metrics={url} health={url}", flush=True)
server.serve_forever()
"""


def test_runs_that_do_not_finish_by_the_deadline_fail_with_the_stuck_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    idle = (sys.executable, "-c", _IDLE_SCHEDULER)
    options = DemoOptions(pods=2, runs=6, timeout=1.5, quiet=True, scheduler_command=idle)
    code = run_demo(options)
    _, err = capsys.readouterr()
    assert code == 1
    assert "cohort-1 not scheduled within --timeout 1.5 s; 1 not done" in err
    assert "cohort-1: Pending" in err
    assert re.search(r"ask why: kruntimes explain --kubeconfig \S+ default/cohort-1", err)


def test_bad_flags_exit_2_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--pods", "1", "--capacity", "1"]) == 2
    err = capsys.readouterr().err
    assert "--pods must be at least 2" in err and "--capacity must be at least 2" in err


# --- pure parts ---------------------------------------------------------------------------------------


def test_the_workload_seeds_the_cohort_then_adds_its_members_and_the_pair_then_the_backlog() -> None:
    work = workload(DemoOptions(pods=6, capacity=3, runs=40))
    assert [[r.name for r in step] for step in work.steps[:2]] == [
        ["cohort-1"],
        ["cohort-2", "cohort-3", "pair-a", "pair-b"],
    ]
    assert len(work.runs) == 40 and len({r.name for r in work.runs}) == 40
    assert work.steps[2][0].name == "batch-01" and work.steps[2][-1].name == "batch-35"
    first = work.steps[0][0].body()
    assert first["metadata"] == {"name": "cohort-1", "namespace": "default", "labels": {"cohort": "lab"}}
    assert first["spec"] == {
        "runtime": "python",
        "mode": {"task": {}},
        "affinity": {
            "runAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"cohort": "lab"}}, "topologyKey": "kruntimes.io/runtime-pod"}
                ]
            }
        },
    }
    assert workload(DemoOptions(capacity=2)).group("cohort")[-1].name == "cohort-2"


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([7.0], 99) == 7.0


def test_the_summary_checks_cohort_and_pair_placement() -> None:
    work = workload(DemoOptions(pods=2, capacity=2, runs=5))
    seen = {
        "cohort-1": Seen(created=0.0, scheduled=0.01, finished=1.0, pod="p0", phase="Succeeded"),
        "cohort-2": Seen(created=0.1, scheduled=0.12, finished=1.1, pod="p0", phase="Succeeded"),
        "pair-a": Seen(created=0.1, scheduled=0.11, finished=1.1, pod="p1", phase="Succeeded"),
        "pair-b": Seen(created=0.1, scheduled=1.2, finished=2.2, pod="p1", phase="Succeeded", waited=True),
        "batch-1": Seen(created=0.2, scheduled=1.1, finished=2.5, pod="p0", phase="Succeeded", waited=True),
    }
    summary = summarize(work, seen)
    assert summary.cohort_ok and not summary.pair_ok and not summary.ok
    assert summary.placements == (("p0", ("cohort-1", "cohort-2", "batch-1")), ("p1", ("pair-a", "pair-b")))
    assert summary.succeeded == 5 and summary.span == pytest.approx(1.2) and summary.elapsed == pytest.approx(2.5)
    assert summary.binds_per_second == pytest.approx(5 / 1.2)
    assert [(name, waited) for name, _, waited in summary.latencies if waited] == [("pair-b", True), ("batch-1", True)]


def test_metrics_line_sums_the_scheduler_counters() -> None:
    text = "\n".join(
        [
            "# TYPE kruntimes_scheduler_sync_total counter",
            'kruntimes_scheduler_sync_total{result="scheduled"} 10.0',
            'kruntimes_scheduler_sync_total{result="no_pods"} 4.0',
            "kruntimes_scheduler_no_pods_total 4.0",
            'kruntimes_scheduler_reservation_conflicts_total{stage="reserve"} 2.0',
            'kruntimes_scheduler_reservation_conflicts_total{stage="bind"} 1.0',
            'kruntimes_scheduler_pending_run_wakeups_total{source="capacity_released"} 7.0',
        ]
    )
    assert metrics_line(text) == "scheduler metrics: 10 scheduled, 4 no-pod waits, 7 wakeups, 3 reservation conflicts"

