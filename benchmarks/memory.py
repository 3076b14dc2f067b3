"""Memory: resident set of a scheduler process holding 100k Runs and 5k Runtime Pods.

    .venv/bin/python benchmarks/memory.py            # 100k Runs, 5k pods (~3 min)
    .venv/bin/python benchmarks/memory.py --quick    # 10k Runs, 500 pods (< 1 min)
    .venv/bin/python benchmarks/memory.py --runs 50000 --pods 2000

The dev API server runs in this process (its objects are written straight through
its ``ObjectService``, which is fast, and its memory is not the scheduler's); the
scheduler (``kruntimes scheduler``) runs in its own process and is measured
through ``/proc/<pid>/status``. Three scheduler processes, one after the other:
on the empty cluster (baseline), with the pods only, and with pods + Runs; each is
measured once its caches have synced (``/readyz``) and its writes have settled.

The Runs: 60 % active (Running, assigned round-robin to the pods, within
capacity), 38 % finished (Succeeded, still assigned), 2 % Pending on a runtime
without pods (they wait; the scheduler writes their Pending status once). Each
Run carries two labels, one request, the Scheduled condition and, when
finished, Running/Completed conditions — what real Runs carry after their life.

Figure of merit: (VmRSS with Runs − VmRSS of the empty baseline) / Runs, in
bytes per tracked Run (pods included, so it is conservative); target ≤ 1 KiB.
Also reported: the same over the pods-only process (Runs alone) and VmHWM.
Exit status 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, start_scheduler, status_kib, stop_process, wait_http_ok  # noqa: E402

from kruntimes.devcluster import DevCluster  # noqa: E402
from kruntimes.devcluster.simulator import PODS, RUNS  # noqa: E402
from kruntimes.devcluster.store import WriteContext  # noqa: E402

TARGET_BYTES: Final = 1024
NS: Final = "default"


def _time(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def populate_pods(cluster: DevCluster, pods: int, capacity: int) -> None:
    rd = cluster.registry.storage(PODS)
    assert rd is not None
    future = _time(datetime.now(timezone.utc) + timedelta(days=1))  # a future probe time is fresh (SPEC §1)
    for i in range(pods):
        name = f"python-{i}"
        body = {
            "metadata": {"name": name, "namespace": NS, "labels": {"runtime": "python"},
                         "annotations": {"kruntimes.io/capacity.runs": str(capacity)}},
            "spec": {"containers": [{"name": "runtime", "image": "kruntimes/runtime:bench"}], "nodeName": "bench"},
        }
        created = cluster.service.create(rd, NS, body, WriteContext("create", user_agent="bench"))
        status = {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": future},
                {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": future, "lastTransitionTime": future},
            ],
        }
        cluster.service.update(rd, NS, name, {**created, "status": status}, WriteContext("update", "status", "bench"))


def populate_runs(cluster: DevCluster, runs: int, pods: int) -> dict[str, int]:
    rd = cluster.registry.storage(RUNS)
    assert rd is not None
    now = _time(datetime.now(timezone.utc))
    counts = {"active": 0, "finished": 0, "pending": 0}
    for i in range(runs):
        name = f"run-{i:06d}"
        kind = "pending" if i % 50 == 0 else ("finished" if i % 5 in (1, 3) else "active")
        body = {
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "Run",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": f"app-{i % 100}", "team": f"t{i % 7}"}},
            "spec": {"runtime": "none" if kind == "pending" else "python", "resources": {"requests": {"runs": "1"}}},
        }
        created = cluster.service.create(rd, NS, body, WriteContext("create", user_agent="bench"))
        counts[kind] += 1
        if kind == "pending":
            continue
        pod = f"python-{i % pods}"
        conditions: list[dict[str, str]] = [
            {"type": "Scheduled", "status": "True", "reason": "Assigned", "message": f"assigned to runtime pod {pod}", "lastTransitionTime": now},
            {"type": "Running", "status": "True" if kind == "active" else "False", "reason": "Started" if kind == "active" else "Completed",
             "message": "running" if kind == "active" else "run finished", "lastTransitionTime": now},
        ]
        status: dict[str, Any] = {"phase": "Running" if kind == "active" else "Succeeded", "assignedPod": pod,
                                  "assignedPodUID": "00000000-0000-0000-0000-%012d" % (i % pods), "conditions": conditions}
        if kind == "finished":
            conditions.append({"type": "Completed", "status": "True", "reason": "Succeeded", "message": "run succeeded", "lastTransitionTime": now})
            status["completionTime"] = now
        cluster.service.update(rd, NS, name, {**created, "status": status}, WriteContext("update", "status", "bench"))
    return counts


def measure(cluster: DevCluster, tmp: Path, name: str, settle: float, env: dict[str, str]) -> dict[str, int | float]:
    kubeconfig = cluster.kubeconfig_path(tmp)
    proc, url = start_scheduler(kubeconfig, tmp, workers=4, namespace=None, name=name, env=env)
    try:
        started = time.monotonic()
        if not wait_http_ok(url + "/readyz", 600):
            raise RuntimeError(f"{name}: the scheduler did not sync")
        synced = time.monotonic() - started
        # settle: the Pending Runs get their one status write; RSS stops moving
        last, stable_since = status_kib(proc.pid, "VmRSS"), time.monotonic()
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now_rss = status_kib(proc.pid, "VmRSS")
            if abs(now_rss - last) > 256:
                last, stable_since = now_rss, time.monotonic()
            elif time.monotonic() - stable_since >= 3.0:
                break
        return {"rss_kib": status_kib(proc.pid, "VmRSS"), "hwm_kib": status_kib(proc.pid, "VmHWM"), "sync_seconds": round(synced, 2)}
    finally:
        stop_process(proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--pods", type=int, default=5_000)
    parser.add_argument("--quick", action="store_true", help="10k Runs, 500 pods")
    parser.add_argument("--settle", type=float, default=30.0, help="longest wait for RSS to settle after sync (default 30 s)")
    parser.add_argument("--gc-default", action="store_true", help="run the scheduler with CPython's default collector")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.pods = 10_000, 500
    env = {"KRUNTIMES_SCHEDULER_GC": "default"} if args.gc_default else {}
    capacity = -(-args.runs // args.pods) + 1
    result: dict[str, Any] = {"benchmark": "memory", "machine": machine(), "runs": args.runs, "pods": args.pods}
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kruntimes-memory-") as tmp_name, DevCluster.start(
        simulator=None, keep_write_history=False, event_window=10_000
    ) as cluster:
        tmp = Path(tmp_name)
        result["empty"] = measure(cluster, tmp, "empty", args.settle, env)
        t0 = time.monotonic()
        populate_pods(cluster, args.pods, capacity)
        result["pods_only"] = measure(cluster, tmp, "pods", args.settle, env)
        result["composition"] = populate_runs(cluster, args.runs, args.pods)
        result["populate_seconds"] = round(time.monotonic() - t0, 1)
        result["full"] = measure(cluster, tmp, "full", args.settle, env)
    empty, pods_only, full = (int(result[k]["rss_kib"]) for k in ("empty", "pods_only", "full"))
    per_run = (full - empty) * 1024 / args.runs
    result["bytes_per_tracked_run"] = round(per_run, 1)
    result["bytes_per_run_excluding_pods"] = round((full - pods_only) * 1024 / args.runs, 1)
    result["bytes_per_pod"] = round((pods_only - empty) * 1024 / args.pods, 1)
    result["target_bytes_per_run"] = TARGET_BYTES
    result["met"] = per_run <= TARGET_BYTES
    result["wall_seconds"] = round(time.monotonic() - began, 1)
    print(json.dumps(result, indent=1))
    print(
        f"scheduler RSS: empty {empty / 1024:.1f} MiB, {args.pods} pods {pods_only / 1024:.1f} MiB, + {args.runs} Runs "
        f"{full / 1024:.1f} MiB (peak {int(result['full']['hwm_kib']) / 1024:.1f} MiB) = {per_run:.0f} B per tracked Run "
        f"({result['bytes_per_run_excluding_pods']:.0f} B without the pods; {result['bytes_per_pod']:.0f} B per pod); "
        f"target <= {TARGET_BYTES} B: {'met' if result['met'] else 'MISSED'}"
    )
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
