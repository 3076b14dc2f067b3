"""Where a bind's CPU goes, stage by stage: each stage's own thread CPU time, per bind.

    .venv/bin/python benchmarks/stages.py                  # 3,000 Pending Runs, 4 workers (~30 s)
    .venv/bin/python benchmarks/stages.py --runs 5000 --workers 1

A dev cluster (``python -m kruntimes.devcluster``, 50 Runtime Pods x 100 slots, no Run executed)
holds the Pending Runs before the scheduler starts; the scheduler then runs in this process, so
its stages can be timed where they run: each named function is wrapped to add the calling thread's
CPU clock (``time.thread_time``) around it. A sampling profiler (py-spy, ``backlog.py
--profile``) says which code is on the CPU; this says how many microseconds each stage costs a
bind, including what the stage pays for cold caches after a thread switch, which a stage timed
alone in a loop does not show. Stages nest (``cycle`` holds ``plan``, ``decide`` and ``write``):
the rows do not add up to the total. Wrapping costs about a microsecond a call.

Prints one line per stage: µs of CPU per bind and calls per bind; then the process's CPU per bind.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

NAMESPACE = "bench"

spent: dict[str, float] = collections.defaultdict(float)
calls: collections.Counter[str] = collections.Counter()
stages: list[str] = []


def timed(owner: Any, attribute: str, stage: str) -> None:
    """Wrap ``owner.attribute`` (a function of a module or a class) to add its thread CPU to ``stage``."""
    inner: Callable[..., Any] = getattr(owner, attribute)
    stages.append(stage)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[stage] += time.thread_time() - began
            calls[stage] += 1

    setattr(owner, attribute, wrapper)


def instrument() -> None:
    from kruntimes.effects import binder, informer, scheduling, schedulingqueue
    from kruntimes.effects.runner import scheduler
    from kruntimes.kubeclient import kube, workqueue
    from kruntimes.pure import step

    timed(scheduler.Scheduler, "_work", "worker thread (all of it)")
    timed(scheduling.SchedulingCycle, "run", "cycle")
    timed(step, "plan", "  plan (sync, snapshot, plan_cycle)")
    timed(step, "take", "    snapshot.take")
    timed(step, "plan_cycle", "    planner.plan_cycle")
    timed(step, "decide", "  decide (the reservation)")
    timed(binder.Binder, "write", "  write (the status PATCH)")
    timed(binder, "patch_body", "    patch_body")
    timed(step, "settle", "  settle")
    timed(scheduling.SchedulingCycle, "_finish", "  finish (metrics, Event, log)")
    timed(schedulingqueue.SchedulingQueue, "after_cycle", "queue.after_cycle")
    timed(workqueue.WorkQueue, "get", "work.get")
    timed(workqueue.WorkQueue, "done", "work.done")
    timed(informer.Informer, "run", "Run/Pod informer threads (all of it)")
    timed(informer.Informer, "handle", "informer.handle (a watch event)")
    timed(informer.Informer, "_decode", "  decode")
    timed(informer, "apply", "  state apply")
    timed(scheduler.Scheduler, "_on_event", "  the scheduler's callback")
    timed(kube, "loads", "JSON read (answers, events, lists)")


def _phase(run: Mapping[str, object]) -> object:
    status = run.get("status")
    return status.get("phase") if isinstance(status, dict) else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3000, help="Pending Runs created before the scheduler starts (default 3000)")
    parser.add_argument("--workers", type=int, default=4, help="the scheduler's --workers (default 4)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        cluster = subprocess.Popen(
            [sys.executable, "-m", "kruntimes.devcluster", "--runtime", f"{NAMESPACE}/python=50x100", "--kubeconfig-out",
             str(kubeconfig), "--auto-create-namespaces"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return _measure(kubeconfig, args.runs, args.workers)
        finally:
            cluster.terminate()
            cluster.wait(30)


def _measure(kubeconfig: Path, runs: int, workers: int) -> int:
    from kruntimes.cli import main as cli
    from kruntimes.kubeclient.kube import RUNS, connect

    deadline = time.monotonic() + 60
    while not kubeconfig.exists():
        if time.monotonic() > deadline:
            print("the dev cluster did not start", file=sys.stderr)
            return 1
        time.sleep(0.1)
    admin = connect(str(kubeconfig)).unwrap()

    def create(index: int) -> None:
        body = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
                "metadata": {"name": f"r-{index:06d}", "namespace": NAMESPACE, "labels": {"app": "bench"}},
                "spec": {"runtime": "python", "mode": {"task": {}}, "resources": {"requests": {"runs": "1"}}}}
        admin.create(RUNS.path(NAMESPACE), body, read=False).unwrap()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(runs)))
    print(f"# {runs} Pending Runs created; the scheduler starts", file=sys.stderr, flush=True)
    instrument()
    bound: list[int] = []

    def stop_when_bound() -> None:
        while True:
            time.sleep(0.5)
            listed = admin.list(RUNS.path(NAMESPACE)).unwrap()[0]
            done = sum(1 for run in listed if _phase(run) == "Scheduled")
            if done >= runs:
                bound.append(done)
                os.kill(os.getpid(), signal.SIGTERM)  # the scheduler stops as it does in a Pod
                return

    threading.Thread(target=stop_when_bound, daemon=True).start()
    code = cli(["scheduler", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE, "--workers", str(workers),
                "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--leader-elect=false",
                "--log-format", "json", "--log-level", "error"])
    if not bound:
        print(f"the scheduler exited ({code}) before every Run was bound", file=sys.stderr)
        return 1
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{'stage':44s} {'µs/bind':>8s} {'calls/bind':>10s}")
    for stage in stages:
        print(f"{stage:44s} {spent[stage] * 1e6 / runs:8.1f} {calls[stage] / runs:10.2f}")
    print(f"process CPU per bind (start-up, the creates' answers and the poller included): "
          f"{(usage.ru_utime + usage.ru_stime) * 1e3 / runs:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
