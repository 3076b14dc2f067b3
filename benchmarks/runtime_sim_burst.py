"""A burst of Runs on the real kube-apiserver: the scheduler under deploy/ RBAC, the pods and the Runs' execution simulated by ``kruntimes runtime-sim``.

    .venv/bin/python benchmarks/runtime_sim_burst.py                 # 1,000 Runs onto 50 pods x 2, 1 s each: ~1 min
    .venv/bin/python benchmarks/runtime_sim_burst.py --runs 200 --pods 10

It starts its own control plane (``tests/controlplane``: etcd + kube-apiserver from the pinned
build, ``bash hack/controlplane/build.sh``), applies ``deploy/``, runs ``kruntimes scheduler`` for
one namespace on a TokenRequest token of its ServiceAccount (``--leader-elect=false``), then
``kruntimes runtime-sim`` as the admin: ``--pods`` Runtime Pods of capacity ``--capacity``, once
they are Ready ``--runs`` Runs created as fast as the server takes them, each executed for
``--duration`` once bound, until every one has finished (``--until-done``). The Runs' own
durations bound the throughput at ``pods x capacity / duration`` Runs/s.

Prints the simulator's summary, then one JSON object: Runs, pods, slots, the creation rate, the
time from the first create to the last Run's end (drain), Runs/s over the drain and that figure's
share of the bound, the most Runs seen at once on one pod, the 403s in the scheduler's log, the
CPU seconds each process spent meanwhile (etcd, kube-apiserver, scheduler, runtime-sim) and the
machine's load average (on a shared machine the figures move with it).
Exit 0 when every Run finished, no pod held more than its capacity and the scheduler met no 403.
"""

from __future__ import annotations

import argparse
import json
import re
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import cpu_seconds  # noqa: E402
from kruntimes.pure.model.times import parse_duration  # noqa: E402
from tests.controlplane.server import ControlPlane, build_binaries  # noqa: E402

KRUNTIMES = Path(sys.executable).with_name("kruntimes")


def kubectl(plane: ControlPlane, *args: str) -> None:
    done = subprocess.run(["kubectl", "--kubeconfig", str(plane.admin_kubeconfig), *args], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {done.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--capacity", type=int, default=2)
    parser.add_argument("--duration", default="1s")
    parser.add_argument("--qps", default="0", help="the simulator's --qps (default 0: no limit)")
    parser.add_argument("--workers", default="8", help="the simulator's --workers (default 8)")
    parser.add_argument("--timeout", default="600s")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kruntimes-burst-") as tmp:
        directory = Path(tmp)
        plane = ControlPlane(directory / "plane", build_binaries()).start()
        scheduler: subprocess.Popen[bytes] | None = None
        try:
            kubectl(plane, "apply", "--server-side", "-k", str(REPO / "deploy"))
            kubectl(plane, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
            namespace = f"burst-{uuid.uuid4().hex[:6]}"
            plane.create_namespace(namespace)
            token = plane.service_account_kubeconfig(directory / "scheduler.kubeconfig", "kruntimes-system", "kruntimes-scheduler")
            log = directory / "scheduler.log"
            with log.open("wb") as out:
                scheduler = subprocess.Popen(
                    [str(KRUNTIMES), "scheduler", "--kubeconfig", str(token), "--namespace", namespace, "--leader-elect=false",
                     "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--log-format", "json"],
                    stdout=out, stderr=subprocess.STDOUT,
                )
            started = time.monotonic()
            servers = {name: pid for name, pid in zip(("etcd", "kube-apiserver"), plane.pids())}
            before = {name: cpu_seconds(pid) for name, pid in servers.items()} | {"scheduler": cpu_seconds(scheduler.pid)}
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            sim = subprocess.run(
                [str(KRUNTIMES), "runtime-sim", "--kubeconfig", str(plane.admin_kubeconfig), "-n", namespace,
                 "--runtime", "python", "--replicas", str(args.pods), "--capacity", f"runs={args.capacity}",
                 "--run-duration", args.duration, "--create-runs", str(args.runs), "--qps", args.qps,
                 "--workers", args.workers, "--until-done", "--timeout", args.timeout, "--progress-interval", "2s"],
                capture_output=True, text=True, check=False,
            )
            wall = time.monotonic() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = {name: round(cpu_seconds(pid) - before[name], 1) for name, pid in servers.items()}
            cpu["scheduler"] = round(cpu_seconds(scheduler.pid) - before["scheduler"], 1)
            cpu["runtime-sim"] = round(after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime, 1)
            scheduler.terminate()
            scheduler.wait(30)
            scheduler = None
        finally:
            if scheduler is not None:
                scheduler.kill()
            plane.stop()
        text = log.read_text()
    sys.stdout.write(sim.stderr)
    drained = re.search(r"all (\d+) finished ([0-9.]+)s after the first was created: (\d+) Runs/s", sim.stderr)
    created = re.search(r"created (\d+) Runs in ([0-9.]+)s \((\d+)/s\)", sim.stderr)
    peak = re.search(r"most Runs at once on one pod: (\d+)", sim.stderr)
    forbidden = len(re.findall(r"forbidden| 403", text, flags=re.IGNORECASE))
    seconds = float(drained.group(2)) if drained else None
    duration = parse_duration(args.duration)
    bound = args.pods * args.capacity / duration.total_seconds() if duration else float("nan")
    result = {
        "runs": args.runs,
        "pods": args.pods,
        "slots": args.pods * args.capacity,
        "run_duration": args.duration,
        "created_per_second": int(created.group(3)) if created else None,
        "drain_seconds": seconds,
        "runs_per_second": round(args.runs / seconds, 1) if seconds else None,
        "share_of_bound": round(args.runs / seconds / bound, 2) if seconds else None,
        "peak_runs_on_a_pod": int(peak.group(1)) if peak else None,
        "scheduler_403s": forbidden,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": cpu,
        "load_average_1m": round(os.getloadavg()[0], 1),
        "exit": sim.returncode,
    }
    print(json.dumps(result))
    ok = sim.returncode == 0 and drained is not None and forbidden == 0 and peak is not None and int(peak.group(1)) <= args.capacity
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
