"""A scheduler's CPU per bind, thread by thread, with Runs created at a steady rate.

    .venv/bin/python benchmarks/threads.py                           # 80 and 12 Runs/s, ~1.5 min
    .venv/bin/python benchmarks/threads.py --rates 40 --namespaces 1,10
    PYTHONPATH=/path/to/old/src .venv/bin/python benchmarks/threads.py   # another tree's scheduler

Processes: the dev API server (``python -m kruntimes.devcluster --execute-runs 1s``; its simulator
keeps the Runtime Pods Running, Ready and heart-beating every 5 s and finishes each bound Run after
a second), one scheduler (``kruntimes scheduler --workers 4``, every namespace; on a CPU of its
own with ``--placement split``, as in ``backlog.py``), and this load generator. 50 pods × 2 slots,
split evenly over ``--namespaces`` namespaces.

Per (rate, namespaces): ``--runs`` Runs created at the rate (one creator per namespace, at its
share of the rate, so with several namespaces Runs come due in groups), until every one has
Succeeded. The count is the same at every rate: a slower rate takes longer, so its fixed costs
(heartbeats, idle wake-ups) weigh more per bind, as they do in a cluster. The scheduler names its
threads in the kernel (``kubeclient/threads.py``); each thread's CPU is read from
``/proc/PID/task/TID/schedstat`` (nanoseconds) and its voluntary context switches (its wake-ups,
nearly) from ``.../status``, before the first create and after the last Run ended. Reported per bind: µs of CPU and wake-ups per thread (threads of one kind summed:
``worker-*``, ``informer-runs`` of every namespace), their total, and cycles and work-queue adds
per bind from ``/metrics``.

No backlog: this is the steady state, where what a bind costs depends on how many events arrive
together (docs/performance.md, "Steady state, thread by thread"). ``backlog.py``
measures a backlog, ``shards.py`` replicas.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    Http,
    Placement,
    ServerProcess,
    create_runs,
    machine,
    scrape,
    start_scheduler,
    stop_process,
    thread_cpu,
    wait_http_ok,
)

PODS = 50
SLOTS = 2
WORKERS = 4
ALL_RUNS = "/apis/kruntimes.io/v1alpha1/runs"


def succeeded(http: Http) -> int:
    return sum(1 for r in http.ok("GET", ALL_RUNS)["items"] if (r.get("status") or {}).get("phase") == "Succeeded")


def measure(rate: float, runs: int, spaces: int, placement: Placement) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        names = ["bench"] if spaces == 1 else [f"bench-{i}" for i in range(spaces)]
        runtimes = [a for ns in names for a in ("--runtime", f"{ns}/python={PODS // spaces}x{SLOTS}")]
        server = ServerProcess.start(tmp, [*runtimes, "--execute-runs", "1s", "--heartbeat-interval", "5s", "--auto-create-namespaces"])
        proc, metrics_url = start_scheduler(server.kubeconfig, tmp, workers=WORKERS, namespace=None, placement=placement)
        try:
            if not wait_http_ok(metrics_url + "/readyz", 120):
                raise RuntimeError("the scheduler did not become ready")
            time.sleep(3.0)  # past the first lists and the first heartbeats
            http = Http(server.url)
            per_namespace = runs // spaces
            total = per_namespace * spaces
            before, began = thread_cpu(proc.pid), time.perf_counter()
            creators = [
                threading.Thread(target=create_runs, args=(server.url, ns, [f"r{i}" for i in range(per_namespace)]),
                                 kwargs={"creators": 1, "rate": rate / spaces})
                for ns in names
            ]
            for creator in creators:
                creator.start()
            for creator in creators:
                creator.join()
            deadline = time.monotonic() + 120
            while succeeded(http) < total:
                if time.monotonic() > deadline:
                    raise RuntimeError("the Runs did not all finish within 2 minutes")
                time.sleep(0.5)
            after, wall = thread_cpu(proc.pid), time.perf_counter() - began
            metrics = scrape(metrics_url)
        finally:
            stop_process(proc)
            server.stop()
    threads = {
        kind: {
            "cpu_us_per_bind": round((cpu - before.get(kind, (0, 0))[0]) / 1e3 / total, 1),
            "wakeups_per_bind": round((switches - before.get(kind, (0, 0))[1]) / total, 2),
        }
        for kind, (cpu, switches) in after.items()
    }
    ranked = dict(sorted(threads.items(), key=lambda kv: -kv[1]["cpu_us_per_bind"]))
    cycles = sum(v for k, v in metrics.items() if k.startswith("kruntimes_scheduler_sync_total{"))
    return {
        "rate": rate,
        "namespaces": spaces,
        "binds": total,
        "wall_seconds": round(wall, 1),
        "cpu_us_per_bind": round(sum(t["cpu_us_per_bind"] for t in threads.values()), 1),
        "cycles_per_bind": round(cycles / total, 3),
        "adds_per_bind": round(metrics.get('workqueue_adds_total{name="runs"}', 0.0) / total, 3),
        "threads": ranked,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="80,12", help="Runs created per second, comma-separated (default 80,12)")
    parser.add_argument("--runs", type=int, default=480, help="Runs created per measurement (default 480: 40 s at 12/s)")
    parser.add_argument("--namespaces", default="1", help="namespaces sharing the 50 pods, comma-separated (default 1)")
    parser.add_argument("--placement", choices=("split", "shared"), default="split",
                        help="split: the scheduler on a CPU of its own (default); shared: every process anywhere")
    parser.add_argument("--json-out", type=Path, help="also write the JSON result here")
    args = parser.parse_args()
    if not Path("/proc/self/task").exists():
        sys.exit("this benchmark reads /proc (Linux)")
    placement = Placement.of(args.placement)
    placement.enter()
    rows = [
        measure(float(rate), args.runs, int(spaces), placement)
        for rate in args.rates.split(",")
        for spaces in args.namespaces.split(",")
    ]
    result = {"benchmark": "threads", "machine": machine(), "placement": placement.describe(),
              "source": os.environ.get("PYTHONPATH", "(installed)"), "results": rows}
    print(json.dumps(result, indent=1))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=1))
    for row in rows:
        parts = ", ".join(f"{kind} {t['cpu_us_per_bind']:.0f} ({t['wakeups_per_bind']:.1f})"
                          for kind, t in row["threads"].items() if t["cpu_us_per_bind"] >= 1)
        print(f"{row['rate']:g} Runs/s, {row['namespaces']} namespace(s): {row['cpu_us_per_bind']:.0f} us CPU per bind, "
              f"{row['cycles_per_bind']:.2f} cycles; per thread, us (wake-ups): {parts}")


if __name__ == "__main__":
    main()
