"""``backlog.py``'s variants for any server (``--server``): ``wide`` and ``startup``, next to the server's floor.

``wide`` (the size N, default 5,000): N Pending Runs created before the scheduler starts, on 50
Runtime Pods x 100 slots of the runtime simulator (no Run is executed: capacity never binds), so
the drain is the scheduler's and the server's alone. Figures from the scheduler's exec: its
first bind (``startup_seconds``), its last (``drain_seconds``), binds per second over that span
and its ratio to the floor measured on the same server in the same run, and the scheduler's CPU
per bind over the same span (start-up included: the process is new), the server's too.

``startup`` (``--startup-size``, default 50,000 Runs): the same with that many Pending Runs
(listed in pages of 500); the scheduler is stopped after ``--startup-binds`` binds. Figures: time
and CPU to readiness, to the first bind, to the last counted.

Each scheduler runs on ``--scheduler-kubeconfig`` credentials (the ServiceAccount token on
``real``), ``--workers 4``, ``--leader-elect=false``, for its namespace only (``--namespace``), so
earlier runs' Runs cost it nothing. ``--scheduler-src LABEL=DIR`` (repeatable) runs the scheduler
of other source trees (``PYTHONPATH=DIR``) in the same run, alternating their order run after run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from _common import VENV_BIN, cpu_seconds, free_port, scrape, stop_process, thread_cpu, wait_http_ok
from _servers import BindTimes, RawClient, Server, create_runs, current_version, run_manifest, start_simulator
from floor import measure_floor

from kruntimes.kubeclient.kube import RUNS

WORKERS: Final = 4


@dataclass(frozen=True)
class Tree:
    label: str
    src: Path | None
    """``None``: this checkout."""


def parse_trees(values: list[str] | None) -> list[Tree]:
    if not values:
        return [Tree("this", None)]
    trees = []
    for value in values:
        label, sep, path = value.partition("=")
        if not sep or not (Path(path) / "kruntimes").is_dir():
            raise SystemExit(f"--scheduler-src {value!r}: want LABEL=DIR, DIR holding the kruntimes package (a tree's src/)")
        trees.append(Tree(label, Path(path).resolve()))
    return trees


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def compile_tree(tree: Tree) -> None:
    """Bytecode for the tree's modules, as the image compiles it at build time (``Dockerfile``): with
    ``PYTHONDONTWRITEBYTECODE`` set (as here, and in the image), a scheduler would otherwise compile
    every module at each start and charge it to its start-up."""
    src = tree.src or Path(__file__).resolve().parents[1] / "src"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True)


def spawn_scheduler(server: Server, namespace: str, tree: Tree, tmp: Path, name: str,
                    profile: Path | None, extra: Sequence[str] = ()) -> tuple[subprocess.Popen[bytes], int, str]:
    """The scheduler (under ``py-spy record`` with ``profile``); (process, the scheduler's pid, metrics URL)."""
    port = free_port()
    cmd = [str(VENV_BIN / "kruntimes"), "scheduler", "--kubeconfig", str(server.scheduler_kubeconfig), "--namespace", namespace,
           "--workers", str(WORKERS), "--metrics-bind-address", f"127.0.0.1:{port}", "--health-probe-bind-address",
           f"127.0.0.1:{port}", "--log-format", "json", "--leader-elect=false", *extra]
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        cmd = [str(VENV_BIN / "py-spy"), "record", "--gil", "--threads", "--format", "raw", "--rate", "1000", "-o", str(profile / f"{name}.txt"), "--", *cmd]
    env = dict(os.environ)
    if tree.src is not None:
        env["PYTHONPATH"] = str(tree.src)
    compile_tree(tree)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp / f"{name}.stderr", "wb"), env=env)
    pid = proc.pid
    if profile is not None:
        deadline = time.monotonic() + 10
        while not _children(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.005)
        pid = _children(proc.pid)[0]
    return proc, pid, f"http://127.0.0.1:{port}"


def stop_scheduler(proc: subprocess.Popen[bytes], pid: int) -> None:
    """SIGTERM to the scheduler itself (py-spy, when it wraps it, then writes its profile and exits)."""
    if pid != proc.pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(60)
            return
        except subprocess.TimeoutExpired:
            pass
    stop_process(proc)


def drain(server: Server, tree: Tree, size: int, *, pods: int, slots: int, stop_after: int | None, tmp: Path,
          profile: Path | None, timeout: float, namespace: str | None = None) -> dict[str, Any]:
    """One scheduler on a backlog of ``size`` Pending Runs (see the module docstring)."""
    ns = namespace or server.namespace(f"wide-{tree.label}-{uuid.uuid4().hex[:6]}".lower())
    out: dict[str, Any] = {"tree": tree.label, "size": size, "namespace": ns}
    if namespace is None:
        simulator = start_simulator(server, ns, pods=pods, slots=slots, run_seconds=None)
        began = time.perf_counter()
        out["create_per_second"] = round(create_runs(server, ns, [run_manifest(ns, f"r-{i:06d}") for i in range(size)]), 1)
        out["create_seconds"] = round(time.perf_counter() - began, 1)
    else:
        simulator = None
    admin = server.admin()
    try:
        watcher = BindTimes(RawClient.of(server.admin_kubeconfig), ns, current_version(admin, RUNS.path(ns)))
    finally:
        admin.close()
    watcher.start()
    watcher.ready.wait(30)
    already = len(watcher.bound)
    wanted = min(size, stop_after) if stop_after else size
    name = f"scheduler-{tree.label}-{ns}"
    server_cpu0 = server.cpu_seconds()
    spawned = time.perf_counter()
    proc, pid, metrics = spawn_scheduler(server, ns, tree, tmp, name, profile)
    try:
        ready = wait_http_ok(metrics + "/readyz", 300)
        ready_at, cpu_ready = time.perf_counter(), cpu_seconds(pid)
        if not ready:
            raise RuntimeError(f"the scheduler did not become ready; see {tmp / (name + '.stderr')}")
        first_at = cpu_first = None
        deadline = spawned + timeout
        while len(watcher.bound) < wanted:
            if watcher.error is not None:
                raise RuntimeError(f"the watch failed: {watcher.error!r}")
            if proc.poll() is not None:
                raise RuntimeError(f"the scheduler exited; see {tmp / (name + '.stderr')}")
            if time.perf_counter() > deadline:
                out["complete"] = False
                break
            if first_at is None and watcher.bound:
                first_at, cpu_first = min(watcher.bound.values()), cpu_seconds(pid)
            time.sleep(0.02)
        else:
            out["complete"] = True
        cpu_done = cpu_seconds(pid)
        threads_done = thread_cpu(pid)
        server_cpu1 = server.cpu_seconds()
        metrics_now = scrape(metrics)
    finally:
        stop_scheduler(proc, pid)
        watcher.stop()
        if simulator is not None:
            simulator.stop()
    times = sorted(watcher.bound.values())
    binds = len(times)
    first = times[0] if times else spawned
    last = times[min(binds, wanted) - 1] if times else spawned
    if first_at is None:
        first_at, cpu_first = first, cpu_done
    cycles = sum(v for k, v in metrics_now.items() if k.startswith("kruntimes_scheduler_sync_duration_seconds_count"))
    drain_seconds = last - spawned
    out.update({
        "binds": binds,
        "bound_before": already,
        "ready_seconds": round(ready_at - spawned, 2),
        "startup_seconds": round(first - spawned, 2),
        "drain_seconds": round(drain_seconds, 2),
        "binds_per_second": round(min(binds, wanted) / drain_seconds, 1) if drain_seconds > 0 else 0.0,
        "cpu_seconds_to_ready": round(cpu_ready, 2),
        "cpu_seconds_to_first_bind": round(cpu_first or 0.0, 2),
        "cpu_ms_per_bind": round(cpu_done * 1000 / max(binds, 1), 3),
        "cpu_ms_per_bind_after_ready": round((cpu_done - cpu_ready) * 1000 / max(binds, 1), 3),
        "server_cpu_ms_per_bind": (round((server_cpu1 - server_cpu0) * 1000 / max(binds, 1), 3)
                                   if server_cpu0 is not None and server_cpu1 is not None else None),
        "cycles_per_bind": round(cycles / max(binds, 1), 2),
        # by kind of thread (the scheduler names its threads), start-up included: µs of CPU and
        # voluntary context switches (a thread that blocked and was woken) per bind
        "thread_us_per_bind": {kind: round(ns / 1e3 / max(binds, 1), 1) for kind, (ns, _) in sorted(threads_done.items(), key=lambda kv: -kv[1][0])},
        "thread_switches_per_bind": {kind: round(n / max(binds, 1), 2) for kind, (_, n) in sorted(threads_done.items(), key=lambda kv: -kv[1][0])},
        "profile": str(profile / f"{name}.txt") if profile is not None else None,
    })
    return out


def run_any_server(server: Server, names: list[str], trees: list[Tree], args: Any, tmp: Path) -> dict[str, Any]:
    """The floor (before and after), then ``wide`` and ``startup`` for every tree, alternating."""
    load = os.getloadavg()
    results: list[dict[str, Any]] = []
    floor_a = measure_floor(server, seconds=args.floor_seconds, label="a")
    for repeat in range(args.repeat):
        order = trees if repeat % 2 == 0 else list(reversed(trees))
        if "wide" in names:
            for size in args.wide_sizes:
                for tree in order:
                    print(f"# wide@{size} {tree.label} ...", file=sys.stderr, flush=True)
                    result = drain(server, tree, size, pods=args.wide_pods, slots=args.wide_slots, stop_after=None, tmp=tmp,
                                   profile=args.profile, timeout=args.timeout or 600.0)
                    results.append({"variant": "wide", "repeat": repeat} | result)
                    print("# " + wide_line(results[-1], floor_a["patches_per_second"]), file=sys.stderr, flush=True)
    if "startup" in names:
        # one namespace of --startup-size Pending Runs; each tree's scheduler started on it in turn
        ns = server.namespace(f"startup-{uuid.uuid4().hex[:6]}")
        simulator = start_simulator(server, ns, pods=args.wide_pods, slots=args.wide_slots, run_seconds=None)
        try:
            began = time.perf_counter()
            rate = create_runs(server, ns, [run_manifest(ns, f"r-{i:06d}") for i in range(args.startup_size)])
            print(f"# startup: {args.startup_size} Runs created in {time.perf_counter() - began:.0f} s ({rate:.0f}/s)",
                  file=sys.stderr, flush=True)
            for repeat in range(args.repeat):
                for tree in (trees if repeat % 2 == 0 else list(reversed(trees))):
                    print(f"# startup@{args.startup_size} {tree.label} ...", file=sys.stderr, flush=True)
                    result = drain(server, tree, args.startup_size, pods=args.wide_pods, slots=args.wide_slots,
                                   stop_after=args.startup_binds, tmp=tmp, profile=args.profile,
                                   timeout=args.timeout or 600.0, namespace=ns)
                    results.append({"variant": "startup", "repeat": repeat} | result)
                    print("# " + startup_line(results[-1]), file=sys.stderr, flush=True)
        finally:
            simulator.stop()
    floor_b = measure_floor(server, seconds=args.floor_seconds, label="b")
    floor = (floor_a["patches_per_second"] + floor_b["patches_per_second"]) / 2
    for r in results:
        if r["variant"] == "wide":
            r["floor_ratio"] = round(r["binds_per_second"] / floor, 3) if floor else None
    return {"server": server.describe(), "loadavg_before": load, "loadavg_after": os.getloadavg(),
            "floor": {"patches_per_second": round(floor, 1), "a": floor_a, "b": floor_b}, "results": results,
            "side_by_side": side_by_side(results, trees)}


def side_by_side(results: list[dict[str, Any]], trees: list[Tree]) -> dict[str, Any]:
    """Per variant and tree the runs' figures; with two trees, the second's over the first's, run by run."""
    table: dict[str, Any] = {}
    for variant in ("wide", "startup"):
        rows = [r for r in results if r["variant"] == variant]
        if not rows:
            continue
        per_tree = {t.label: [r for r in rows if r["tree"] == t.label] for t in trees}
        keys = ("binds_per_second", "floor_ratio", "cpu_ms_per_bind", "startup_seconds", "server_cpu_ms_per_bind") \
            if variant == "wide" else ("ready_seconds", "startup_seconds", "cpu_seconds_to_first_bind", "cpu_ms_per_bind")
        entry: dict[str, Any] = {label: {k: [r.get(k) for r in runs] for k in keys} for label, runs in per_tree.items()}
        if len(trees) == 2:
            a, b = per_tree[trees[0].label], per_tree[trees[1].label]
            entry[f"{trees[1].label}/{trees[0].label}"] = {
                k: [round(y[k] / x[k], 3) if x.get(k) and y.get(k) is not None else None for x, y in zip(a, b)] for k in keys}
        table[variant] = entry
    return table


def wide_line(r: dict[str, Any], floor: float | None = None) -> str:
    ratio = r.get("floor_ratio") or (r["binds_per_second"] / floor if floor else None)
    server = f", server {r['server_cpu_ms_per_bind']:.2f} ms/bind" if r.get("server_cpu_ms_per_bind") is not None else ""
    return (f"wide @ {r['size']} [{r['tree']}]{'' if r['complete'] else ' (INCOMPLETE)'}: {r['binds_per_second']:.0f} binds/s"
            + (f" = {ratio:.2f}x floor" if ratio else "")
            + f", {r['cpu_ms_per_bind']:.3f} ms CPU/bind (start-up included; {r['cpu_ms_per_bind_after_ready']:.3f} after ready)"
            f", first bind {r['startup_seconds']:.1f} s, last {r['drain_seconds']:.1f} s, {r['cycles_per_bind']:.2f} cycles/bind{server}")


def startup_line(r: dict[str, Any]) -> str:
    return (f"startup @ {r['size']} [{r['tree']}]: ready {r['ready_seconds']:.1f} s ({r['cpu_seconds_to_ready']:.1f} CPU s), "
            f"first bind {r['startup_seconds']:.1f} s ({r['cpu_seconds_to_first_bind']:.1f} CPU s), "
            f"{r['binds']} binds by {r['drain_seconds']:.1f} s")
