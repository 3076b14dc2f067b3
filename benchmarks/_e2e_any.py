"""``e2e.py --server``: the scheduler end to end on any server, next to that server's floor.

Per pod count P (``--pods``) and source tree (``--scheduler-src``, alternating): a namespace of
its own; P Runtime Pods of the runtime simulator (``kruntimes.runtimesim``), with room for every
Run (no Run is executed); ``--initial`` Runs, the scheduler started on its ServiceAccount's token
(``--workers``, ``--leader-elect=false``, this namespace only) and those bound; then a burst of
``--runs`` Runs created as fast as the server takes them (8 creators, kept connections), then
``--paced-runs`` at ``--paced-rate`` a second. The pods' heartbeat is every
max(5 s, P / 25 s) so that heartbeats cost the server at most 25 writes a second whatever P
(5,000 pods on the real server would otherwise spend its floor on heartbeats), and the scheduler's
``--heartbeat-stale-after`` is three heartbeats.

The floor (``floor.py``) before and after, on the same server, with a paced step at
``--paced-rate``: its status patches' p99 is the server's own, against which the scheduler's
paced bind p99 (create sent -> bind seen on this process's watch) is set.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from _common import cpu_seconds, percentile, scrape, thread_cpu, throughput_samples, wait_http_ok
from _servers import BindTimes, RawClient, Server, create_runs, current_version, run_manifest, start_simulator
from _wide import Tree, spawn_scheduler, stop_scheduler
from floor import measure_floor

from kruntimes.kubeclient.kube import RUNS


def phase_stats(sent: dict[str, float], bound: dict[str, float]) -> dict[str, Any]:
    start = min(sent.values())
    binds = [bound[k] for k in sent if k in bound]
    end = max(binds) if binds else start
    latencies = [(bound[k] - t) * 1000 for k, t in sent.items() if k in bound]
    seconds = end - start
    samples = throughput_samples(binds, start, end)
    return {
        "runs": len(sent), "bound": len(binds), "seconds": round(seconds, 2),
        "runs_per_second": round(len(binds) / seconds, 1) if seconds > 0 else 0.0,
        "per_second_min": min(samples, default=0),
        "latency_ms": {q: round(percentile(latencies, v), 1) for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
        | {"max": round(max(latencies, default=0.0), 1)},
    }


def wait_bound(watcher: BindTimes, names: list[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if watcher.error is not None:
            raise RuntimeError(f"the watch failed: {watcher.error!r}")
        if all(n in watcher.bound for n in names):
            return True
        time.sleep(0.05)
    return False


def one(server: Server, tree: Tree, pods: int, args: Any, tmp: Path) -> dict[str, Any]:
    from e2e import paced_breakdown

    ns = server.namespace(f"e2e-{tree.label}-{pods}-{uuid.uuid4().hex[:4]}".lower())
    heartbeat = max(5.0, pods / 25)
    capacity = max(2, -(-(args.initial + args.runs + args.paced_runs) * 2 // pods))
    began = time.perf_counter()
    simulator = start_simulator(server, ns, pods=pods, slots=capacity, run_seconds=None, heartbeat=heartbeat, timeout=900)
    out: dict[str, Any] = {"tree": tree.label, "pods": pods, "capacity_runs_per_pod": capacity, "heartbeat_seconds": heartbeat,
                           "pods_ready_seconds": round(time.perf_counter() - began, 1)}
    initial = [f"init-{i}" for i in range(args.initial)]
    burst = [f"burst-{i}" for i in range(args.runs)]
    paced = [f"paced-{i}" for i in range(args.paced_runs)]
    proc = None
    watcher = None
    try:
        create_runs(server, ns, [run_manifest(ns, n) for n in initial])
        admin = server.admin()
        watcher = BindTimes(RawClient.of(server.admin_kubeconfig), ns, current_version(admin, RUNS.path(ns)))
        admin.close()
        watcher.start()
        watcher.ready.wait(30)
        name = f"scheduler-{tree.label}-{ns}"
        proc, pid, metrics = spawn_scheduler(server, ns, tree, tmp, name, None,
                                             ["--heartbeat-stale-after", f"{int(3 * heartbeat)}s"])
        if not wait_http_ok(metrics + "/readyz", 300) or not wait_bound(watcher, initial, 300):
            raise RuntimeError(f"the scheduler did not bind the initial Runs; see {tmp / (name + '.stderr')}")
        cpu0, server0, threads0 = cpu_seconds(pid), server.cpu_seconds(), thread_cpu(pid)
        sent: dict[str, float] = {}
        create_runs(server, ns, [run_manifest(ns, n) for n in burst], sent=sent)
        complete = wait_bound(watcher, burst, args.timeout)
        cpu1, server1, threads1 = cpu_seconds(pid), server.cpu_seconds(), thread_cpu(pid)
        out["burst"] = phase_stats(sent, watcher.bound) | {"complete": complete}
        bound = max(out["burst"]["bound"], 1)
        out["cpu_ms_per_bind"] = round((cpu1 - cpu0) * 1000 / bound, 3)
        out["server_cpu_ms_per_bind"] = round((server1 - server0) * 1000 / bound, 3) if server0 is not None and server1 is not None else None
        out["thread_us_per_bind"] = {k: round((ns_ - threads0.get(k, (0, 0))[0]) / 1e3 / bound, 1) for k, (ns_, _) in threads1.items()}
        before = scrape(metrics)
        sent_paced: dict[str, float] = {}
        create_runs(server, ns, [run_manifest(ns, n) for n in paced], sent=sent_paced, threads=4, rate=args.paced_rate)
        wait_bound(watcher, paced, 120)
        out["paced"] = phase_stats(sent_paced, watcher.bound) | {"rate": args.paced_rate,
                                                                 "inside_scheduler_ms": paced_breakdown(before, scrape(metrics))}
        out["unbound"] = sum(1 for n in initial + burst + paced if n not in watcher.bound)
        out["overcommitted_pods"] = len(simulator.overcommitted())
    finally:
        if proc is not None:
            stop_scheduler(proc, pid)
        if watcher is not None:
            watcher.stop()
        simulator.stop()
    return out


def run_any_server(server: Server, pods: list[int], trees: list[Tree], args: Any, tmp: Path) -> dict[str, Any]:
    load = os.getloadavg()
    floor_a = measure_floor(server, seconds=args.floor_seconds, paced=args.paced_rate, label="a")
    results = []
    for repeat in range(args.repeat):
        for count in pods:
            for tree in (trees if repeat % 2 == 0 else list(reversed(trees))):
                print(f"# e2e {tree.label} @ {count} pods ...", flush=True, file=sys.stderr)
                results.append({"repeat": repeat} | one(server, tree, count, args, tmp))
                print("# " + summary_line(results[-1]), flush=True, file=sys.stderr)
    floor_b = measure_floor(server, seconds=args.floor_seconds, paced=args.paced_rate, label="b")
    floor = (floor_a["patches_per_second"] + floor_b["patches_per_second"]) / 2
    paced_p99 = (floor_a["paced"]["latency_ms"]["p99"] + floor_b["paced"]["latency_ms"]["p99"]) / 2
    for r in results:
        r["floor_ratio"] = round(r["burst"]["runs_per_second"] / floor, 3) if floor else None
        r["paced_p99_over_server_patch_p99"] = round(r["paced"]["latency_ms"]["p99"] / paced_p99, 2) if paced_p99 else None
    return {"server": server.describe(), "loadavg_before": load, "loadavg_after": os.getloadavg(),
            "floor": {"patches_per_second": round(floor, 1), "paced_patch_p99_ms": round(paced_p99, 2), "a": floor_a, "b": floor_b},
            "results": results}


def summary_line(r: dict[str, Any]) -> str:
    ratio = f" = {r['floor_ratio']:.2f}x floor" if r.get("floor_ratio") else ""
    paced_ratio = f" ({r['paced_p99_over_server_patch_p99']:.1f}x the server's patch p99)" if r.get("paced_p99_over_server_patch_p99") else ""
    server = f", server {r['server_cpu_ms_per_bind']:.2f} ms/bind" if r.get("server_cpu_ms_per_bind") is not None else ""
    return (f"[{r['tree']}] @ {r['pods']} pods: burst {r['burst']['runs_per_second']:.0f} Runs/s{ratio}, "
            f"p50/p99 {r['burst']['latency_ms']['p50']:.0f}/{r['burst']['latency_ms']['p99']:.0f} ms; "
            f"paced@{r['paced']['rate']:g}/s p50/p99 {r['paced']['latency_ms']['p50']:.1f}/{r['paced']['latency_ms']['p99']:.1f} ms{paced_ratio}; "
            f"{r['cpu_ms_per_bind']:.3f} ms CPU/bind{server}; unbound {r['unbound']}; overcommitted pods {r['overcommitted_pods']}")
