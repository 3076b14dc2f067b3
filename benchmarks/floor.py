"""The server's floor: the most Run status merge-patches per second it takes, with no scheduler running.

    .venv/bin/python benchmarks/floor.py --server real          # the test suite's kube-apiserver + etcd (~1 min)
    .venv/bin/python benchmarks/floor.py --server dev           # the dev cluster
    .venv/bin/python benchmarks/floor.py --server ~/.kube/config --clients 8,16

``backlog.py`` and ``e2e.py`` measure it in the same run as the scheduler, on the same server;
this script measures it alone.

**What is sent.** Each client is a thread with one kept-alive connection (``kubeclient.kube.Kube``,
the scheduler's own client, on the scheduler's credentials: its ServiceAccount token on ``real``)
and one Run of its own, created beforehand. It sends a bind's merge patch to that Run's ``status``
(``pure.status.patch_body``: phase, pod, pod UID, a ``Scheduled`` condition, the resourceVersion it
last saw as the precondition), alternating between two pods so every patch is a real write, as
fast as the answers come. One watch of the namespace is open meanwhile, as a scheduler's is.

**Enough clients.** Clients run eight to a process (so the client's interpreter is not the
limit), all starting at once; each step runs ``--seconds``. Steps double the clients from the
first of ``--clients`` (default 8, 16, 32, 64) until one does not raise the rate by at least
``--gain`` (5 %): the floor is the best step. A floor measured with a weaker client than the
server's limit would not be a floor, so the steps and each one's rate are printed with it.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _servers import SERVER_HELP, RawClient, Server, run_manifest, start_server  # noqa: E402

PER_PROCESS: Final = 8
PODS: Final = ("python-0", "python-1")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# --- one process of clients -----------------------------------------------------------------------


def worker(args: argparse.Namespace) -> int:
    """``--worker``: ``--threads`` clients; prints ``ready``, waits for a line on stdin, patches for
    ``--seconds`` (or at ``--rate`` a second over all threads), prints one JSON line."""
    from kruntimes.kubeclient.kube import RUNS, connect
    from kruntimes.pure.model.objects import Condition
    from kruntimes.pure.status import StatusPatch, patch_body

    admin = connect(args.admin).unwrap()
    patcher = connect(args.patcher, user_agent="kruntimes-floor").unwrap()
    names = [f"floor-{args.tag}-{i}" for i in range(args.threads)]
    versions: dict[str, str] = {}
    uids: dict[str, str] = {}
    for name in names:
        created = admin.request("POST", RUNS.path(args.namespace), body=run_manifest(args.namespace, name),
                                content_type="application/json").unwrap()
        versions[name] = str(created["metadata"]["resourceVersion"])
        uids[name] = str(created["metadata"]["uid"])
    admin.close()

    def body(name: str, n: int) -> str:
        pod = PODS[n % 2]
        now = datetime.now(timezone.utc)
        patch = StatusPatch("Scheduled", pod, uids[name], "",
                            (Condition("Scheduled", "True", "Assigned", f"assigned to runtime pod {pod}", now),), None)
        return patch_body(patch, versions[name])

    counts = {"patches": 0, "conflicts": 0, "errors": 0}
    latencies: list[float] = []
    lock = threading.Lock()
    go = threading.Event()
    warm = threading.Barrier(args.threads + 1)

    def client(index: int) -> None:
        name = names[index]
        path = RUNS.path(args.namespace, name)
        n = 0

        def once() -> tuple[bool, float]:
            nonlocal n
            sent = time.perf_counter()
            result = patcher.patch_status(path, body(name, n))
            n += 1
            answered = time.perf_counter()
            stored = result.value_or(None)
            if stored is not None:
                versions[name] = str(stored["metadata"]["resourceVersion"])
                return True, answered - sent
            with lock:
                counts["conflicts" if result.failure().kind == "conflict" else "errors"] += 1
            return False, answered - sent

        once()  # the connection (and TLS) made before the clock starts
        warm.wait()
        go.wait()
        began = time.perf_counter()
        end = began + args.seconds
        local: list[float] = []
        i = 0
        while True:
            if args.rate > 0:
                due = began + (i * args.threads + index) / args.rate
                if due >= end:
                    break
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            elif time.perf_counter() >= end:
                break
            ok, seconds = once()
            i += 1
            if ok:
                local.append(seconds)
        with lock:
            counts["patches"] += len(local)
            latencies.extend(local)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    warm.wait()
    print("ready", flush=True)
    sys.stdin.readline()
    go.set()
    for thread in threads:
        thread.join()
    patcher.close()
    print(json.dumps(counts | {"latencies_ms": [round(s * 1000, 3) for s in latencies]}), flush=True)
    return 0


# --- the parent -----------------------------------------------------------------------------------


def step(server: Server, namespace: str, clients: int, seconds: float, rate: float = 0.0) -> dict[str, Any]:
    """``clients`` clients in processes of :data:`PER_PROCESS`, started together; patches/s and latency."""
    processes = max(1, math.ceil(clients / PER_PROCESS))
    sizes = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", "--admin", str(server.admin_kubeconfig), "--patcher",
             str(server.scheduler_kubeconfig), "--namespace", namespace, "--threads", str(size),
             "--tag", f"{clients}c{i}-{uuid.uuid4().hex[:4]}", "--seconds", str(seconds),
             "--rate", str(rate * size / clients if rate else 0)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        for i, size in enumerate(sizes)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a floor client process did not start")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outs = [json.loads(proc.communicate(timeout=seconds + 120)[0].strip().splitlines()[-1]) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    latencies = [ms for out in outs for ms in out["latencies_ms"]]
    patches = sum(out["patches"] for out in outs)
    return {
        "clients": clients,
        "processes": processes,
        "patches_per_second": round(patches / seconds, 1),
        "conflicts": sum(out["conflicts"] for out in outs),
        "errors": sum(out["errors"] for out in outs),
        "latency_ms": {"p50": round(_percentile(latencies, 0.5), 2), "p99": round(_percentile(latencies, 0.99), 2)},
    }


def _drain(stream: Any, stop: threading.Event) -> None:
    try:
        while not stop.is_set() and stream.read1(1 << 16):
            pass
    except Exception:  # noqa: BLE001 (closed under us at the end)
        pass


def measure_floor(server: Server, *, clients: list[int] | None = None, seconds: float = 8.0, gain: float = 0.05,
                  paced: float = 0.0, label: str = "") -> dict[str, Any]:
    """The floor (see the module docstring); with ``paced`` > 0 also the latency of status patches
    sent at that many a second (the server's own p99 at a scheduler's pace)."""
    namespace = server.namespace(f"floor-{label or uuid.uuid4().hex[:6]}")
    raw = RawClient.of(server.admin_kubeconfig)
    stream = raw.stream(f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs?watch=1&allowWatchBookmarks=false")
    stop = threading.Event()
    threading.Thread(target=_drain, args=(stream, stop), daemon=True).start()
    steps: list[dict[str, Any]] = []
    try:
        ladder = list(clients or [8, 16, 32, 64])
        best = 0.0
        count = ladder[0]
        while True:
            result = step(server, namespace, count, seconds)
            steps.append(result)
            print(f"# floor: {count} clients: {result['patches_per_second']:.0f} patches/s, p50/p99 "
                  f"{result['latency_ms']['p50']:.1f}/{result['latency_ms']['p99']:.1f} ms", file=sys.stderr, flush=True)
            rate = result["patches_per_second"]
            improved = rate >= best * (1 + gain)
            best = max(best, rate)
            if not improved or (clients and count >= max(ladder)):
                break
            count = count * 2 if not clients else next((c for c in ladder if c > count), 0)
            if not count:
                break
        out: dict[str, Any] = {"patches_per_second": best, "steps": steps, "seconds_per_step": seconds, "gain": gain}
        if paced > 0:
            out["paced"] = step(server, namespace, PER_PROCESS, max(seconds, 10.0), rate=paced) | {"rate": paced}
        return out
    finally:
        stop.set()
        try:
            stream.shutdown()  # type: ignore[attr-defined]  (urllib3's HTTPResponse: wakes the reader)
            stream.close()
        except Exception:  # noqa: BLE001
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="dev", help=SERVER_HELP)
    parser.add_argument("--scheduler-kubeconfig", type=Path, help="with --server PATH: the patches' credentials")
    parser.add_argument("--clients", help="client counts to try, comma-separated (default 8, doubling while it helps)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per step (default 8)")
    parser.add_argument("--gain", type=float, default=0.05, help="least gain for another step (default 0.05)")
    parser.add_argument("--paced", type=float, default=0.0, help="also patches at this rate/s, for their latency")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--admin", help=argparse.SUPPRESS)
    parser.add_argument("--patcher", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=8, help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    clients = [int(c) for c in args.clients.split(",")] if args.clients else None
    with tempfile.TemporaryDirectory(prefix="kruntimes-floor-") as tmp:
        server = start_server(args.server, Path(tmp), scheduler_kubeconfig=args.scheduler_kubeconfig)
        try:
            floor = measure_floor(server, clients=clients, seconds=args.seconds, gain=args.gain, paced=args.paced)
        finally:
            server.stop()
    print(json.dumps({"server": server.describe(), "floor": floor}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
