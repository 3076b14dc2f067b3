"""L1: the scheduler end to end against the local API server, next to the raw-PATCH floor.

    .venv/bin/python benchmarks/e2e.py             # full: 100 and 1,000 pods, 1k + 10k Runs, 5 variants (~12 min)
    .venv/bin/python benchmarks/e2e.py --quick     # 100 and 1,000 pods, 300 + 2k Runs, 3 variants (< 2 min)
    .venv/bin/python benchmarks/e2e.py --pods 100 --variants base,conflict10 --runs 5000
    .venv/bin/python benchmarks/e2e.py --server real --pods 5000 --runs 5000   # any server: _e2e_any.py

Three processes per variant, so no one's CPU is charged to another and no GIL is
shared: the dev API server (``python -m kruntimes.devcluster``, with its runtime
simulator keeping P Runtime Pods Running/Ready and heartbeating), the scheduler
(``kruntimes scheduler --namespace default --workers N``), and this load
generator (creator threads + one watcher, raw urllib3). The *floor* is a fourth
process run before and after the scheduler on the same server: N threads of
``kubeclient.kube.Kube.patch_status`` sending the same bind body (carrying the
observed resourceVersion) to every Pending Run of its own namespace as its
watch delivers them, i.e. a scheduler that does no planning. Both face the same
creation burst, so the ratio scheduler/floor is what the scheduler's own work costs.

Per variant: 1. floor A (namespace ``floor-a``): ``--initial`` Runs, the floor
starts, then ``--floor-runs`` more created by ``--creators`` threads as fast as
the server accepts. 2. scheduler (namespace ``default``): ``--initial`` Runs,
the scheduler starts and binds them, then ``--runs`` Runs as fast as the server
accepts (throughput; latency here is queueing), then ``--paced-runs`` at
``--paced-rate``/s (service latency), with the variant's faults or churn on
throughout. 3. checks: every Run bound (no leaked reservation), the write
history replayed by ``kruntimes.verify`` (no overcommit, no double bind).
4. floor B (namespace ``floor-b``). Throughput = Runs bound during the burst /
(last bind seen − first create sent); ratio = scheduler / mean(floor A, floor B).

Latency is measured from a creator's send to this process's watch receipt of the
bind, so it also carries the API server's and this process's own pauses: both
freeze the survivors of each full collection (``devcluster.gcpauses``), which
otherwise stalled them for 240-440 ms at 5,000 pods. Each burst and the paced
phase list their ``slowest`` Runs with the second they were sent, so a stall
shows as a cluster; the paced phase also gives, from the scheduler's own
histograms (bucket bounds, ms), its work-queue wait, a worker's whole turn on a
key and the API server's answer to a PATCH (``inside_scheduler_ms``), which tell
the scheduler's share of a paced Run's latency from the server's.

Prints one JSON object, then a one-line summary per variant; ``--plot`` writes a PNG
of per-second throughput. Exit status 1 when a check fails (leak, overcommit).

Idle (``--idle-seconds``, after the initial Runs are bound, before the burst): the
scheduler's and the server's CPU per second with nothing created, and per heartbeat
(P pods / the heartbeat interval a second): what applying, and serving, a pod's
heartbeat costs, the background every other figure here runs against.
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kruntimes.devcluster.command import parse_duration  # noqa: E402
from kruntimes.devcluster.gcpauses import shorten_pauses  # noqa: E402
from _common import (  # noqa: E402
    PODS_PATH,
    RUNS_PATH,
    BindWatcher,
    Http,
    ServerProcess,
    cpu_seconds,
    create_runs,
    machine,
    percentile,
    scrape,
    start_profiler,
    stop_profiler,
    start_scheduler,
    status_kib,
    stop_process,
    summarize,
    throughput_samples,
    wait_http_ok,
    wait_pods_ready,
)

SCHED_NS: Final = "default"
VARIANTS: Final = ("base", "conflict1", "conflict10", "churn")


@dataclass(frozen=True)
class Variant:
    name: str
    pods: int
    conflict: float = 0.0
    churn: bool = False
    env: tuple[tuple[str, str], ...] = ()
    """A/B switches: upper-case keys are the scheduler's environment (e.g.
    KRUNTIMES_SCHEDULER_GC=default), ``workers=N`` its ``--workers``."""

    @property
    def label(self) -> str:
        suffix = "".join(f"+{k}={v}" for k, v in self.env)
        return f"{self.name}{suffix}@{self.pods}"


# --- the floor: a process that binds without planning ---------------------------------------------


def floor_worker(args: argparse.Namespace) -> int:
    """``--floor-worker``: watch the namespace, PATCH every Pending Run with a bind body."""
    from kruntimes.kubeclient.kube import RUNS, Kube, connect
    from kruntimes.pure.model.objects import Condition
    from kruntimes.pure.status import StatusPatch, patch_body

    kube: Kube = connect(args.kubeconfig, user_agent="kruntimes-floor").unwrap()
    ns: str = args.namespace
    todo: queue.Queue[tuple[str, str] | None] = queue.Queue()
    seen: set[str] = set()
    done = threading.Event()
    counts = {"patched": 0, "conflicts": 0, "errors": 0}
    lock = threading.Lock()

    def offer(obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        name = str(meta.get("name", ""))
        if name and name not in seen and not status.get("assignedPod") and status.get("phase") in (None, "", "Pending"):
            seen.add(name)
            todo.put((name, str(meta.get("resourceVersion", ""))))

    def watch() -> None:
        listed = kube.list(RUNS.path(ns)).unwrap()
        for item in listed[0]:
            offer(item)
        version = listed[1]
        while not done.is_set():
            for event in kube.watch(RUNS.path(ns), version, timeout_seconds=600):
                version = event.resource_version or version
                if event.type in ("ADDED", "MODIFIED"):
                    offer(event.object)
                if done.is_set():
                    return

    def patcher(index: int) -> None:
        n = 0
        while True:
            item = todo.get()
            if item is None:
                return
            name, version = item
            pod = f"python-{(index + n * args.threads) % args.pods}"
            n += 1
            now = datetime.now(timezone.utc)
            patch = StatusPatch(
                "Scheduled", pod, "00000000-0000-0000-0000-000000000000", "",
                (Condition("Scheduled", "True", "Assigned", f"assigned to runtime pod {pod}", now),), None,
            )
            result = kube.patch_status(RUNS.path(ns, name), patch_body(patch, version))
            with lock:
                if result.value_or(None) is not None:
                    counts["patched"] += 1
                    if counts["patched"] >= args.expect:
                        done.set()
                elif result.failure().kind == "conflict":
                    counts["conflicts"] += 1
                else:
                    counts["errors"] += 1

    threads = [threading.Thread(target=patcher, args=(i,), daemon=True) for i in range(args.threads)]
    for t in threads:
        t.start()
    threading.Thread(target=watch, daemon=True).start()
    done.wait(args.timeout)
    for _ in threads:
        todo.put(None)
    print(json.dumps(counts), flush=True)
    return 0


# --- phases ----------------------------------------------------------------------------------------


def burst_stats(sent: dict[tuple[str, str], float], watcher: BindWatcher) -> dict[str, Any]:
    """Throughput and latency of one burst from the creators' send times and the watcher's receipts."""
    start = min(sent.values())
    binds = [watcher.bound[k] for k in sent if k in watcher.bound]
    end = max(binds) if binds else start
    timed = sorted(((watcher.bound[k] - t) * 1000, t) for k, t in sent.items() if k in watcher.bound)
    latencies = [ms for ms, _ in timed]
    samples = throughput_samples(binds, start, end)
    elapsed = end - start
    return {
        "runs": len(sent),
        "bound": len(binds),
        "seconds": round(elapsed, 2),
        "runs_per_second": round(len(binds) / elapsed, 1) if elapsed > 0 else 0.0,
        "per_second": summarize([float(s) for s in samples]) | {"min": min(samples, default=0)},
        "samples": samples,
        "latency_ms": {
            "p50": round(percentile(latencies, 0.5), 1),
            "p90": round(percentile(latencies, 0.9), 1),
            "p99": round(percentile(latencies, 0.99), 1),
            "max": round(max(latencies, default=0.0), 1),
        },
        # the slowest Runs and when each was sent (seconds into the phase): a stall shows as a cluster
        "slowest": [{"sent_s": round(t - start, 3), "latency_ms": round(ms, 1)} for ms, t in reversed(timed[-10:])],
    }


_BUCKET: Final = re.compile(r'^(?P<name>[a-z_]+)_bucket\{(?P<labels>.*)\}$')


def histogram_quantile(before: dict[str, float], after: dict[str, float], name: str, q: float, match: str = "") -> float | None:
    """The upper bound (ms) of the bucket holding quantile ``q`` of what ``name`` observed between two
    scrapes (series whose labels contain ``match``); ``None`` when it observed nothing."""
    buckets: list[tuple[float, float]] = []
    for key, value in after.items():
        found = _BUCKET.match(key)
        if found is None or found["name"] != name or match not in found["labels"]:
            continue
        le = re.search(r'le="([^"]+)"', found["labels"])
        if le is not None:
            buckets.append((float(le[1]), value - before.get(key, 0.0)))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None
    for bound, count in buckets:
        if count >= q * total:
            return bound * 1000
    return None


def paced_breakdown(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Where a paced Run's time went inside the scheduler, from its own histograms (bucket bounds):
    waiting in the work queue, a worker's whole turn on the key, and the API server's answer to a PATCH."""
    return {
        f"{what}_p{int(q * 100)}": histogram_quantile(before, after, name, q, match)
        for what, name, match in (
            ("queue_wait", "workqueue_queue_duration_seconds", ""),
            ("work", "workqueue_work_duration_seconds", ""),
            ("patch", "kruntimes_scheduler_api_request_duration_seconds", 'verb="PATCH"'),
        )
        for q in (0.5, 0.99)
    }


def floor_phase(server: ServerProcess, watcher: BindWatcher, args: argparse.Namespace, ns: str, tmp: Path) -> dict[str, Any]:
    import subprocess

    initial = [f"init-{i}" for i in range(args.initial)]
    burst = [f"burst-{i}" for i in range(args.floor_runs)]
    create_runs(server.url, ns, initial, creators=args.creators)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--floor-worker", "--kubeconfig", str(server.kubeconfig), "--namespace", ns,
         "--threads", str(args.workers), "--pods", "100", "--expect", str(len(initial) + len(burst)), "--timeout", "300"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        if not watcher.wait_all(ns, initial, 120):
            raise RuntimeError(f"floor {ns}: the initial Runs were not patched")
        cpu0 = cpu_seconds(proc.pid)
        sent = create_runs(server.url, ns, burst, creators=args.creators)
        if not watcher.wait_all(ns, burst, 300):
            raise RuntimeError(f"floor {ns}: the burst was not patched")
        cpu1 = cpu_seconds(proc.pid)
        out, _ = proc.communicate(timeout=30)
    finally:
        stop_process(proc)
    stats = burst_stats(sent, watcher)
    stats["client_cpu_seconds_per_1000"] = round((cpu1 - cpu0) / len(burst) * 1000, 3)
    stats["worker"] = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    return stats


def churn_loop(http: Http, pods: int, stop: threading.Event, interval: float, log: dict[str, int]) -> None:
    """Alternately make a pod unready (the simulator's next heartbeat makes it Ready again) and
    delete one (the simulator recreates it under the same name with a new UID)."""
    i = 0
    while not stop.wait(interval):
        name = f"python-{(i * 37) % pods}"
        path = PODS_PATH.format(ns=SCHED_NS) + f"/{name}"
        try:
            if i % 2 == 0:
                status, pod = http.call("GET", path)
                if status == 200:
                    conditions = [
                        {**c, "status": "False"} if c.get("type") == "Ready" else c for c in pod["status"].get("conditions", [])
                    ]
                    body = {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]}, "status": {"conditions": conditions}}
                    if http.call("PATCH", path + "/status", body, {"Content-Type": "application/merge-patch+json"})[0] == 200:
                        log["unready"] += 1
            else:
                if http.call("DELETE", path)[0] in (200, 202):
                    log["deleted"] += 1
        except Exception:  # a churn hiccup must not end the benchmark
            log["errors"] += 1
        i += 1


def verify(http: Http, variant: Variant) -> dict[str, Any]:
    """Replay the write history of the scheduler's namespace with ``kruntimes.verify``."""
    from kruntimes.verify import CheckOptions, check_history, records_from_json

    history = http.ok("GET", "/_devcluster/history")
    items = [item for item in history["items"] if item.get("namespace") in (SCHED_NS, "")]
    report = check_history(records_from_json(items), CheckOptions(race_window=2.0 if variant.churn else 0.0))
    summary = report.summary()
    return {
        "ok": report.ok,
        "records": summary["records"],
        "binds": summary["binds"],
        "raced_binds": summary["raced_binds"],
        "violations": summary["violations"],
        "first_violations": summary["first_violations"][:5],
    }


def idle_phase(server: ServerProcess, scheduler_pid: int, pods: int, args: argparse.Namespace) -> dict[str, Any]:
    """Both processes' CPU while nothing is created: the pods' heartbeats (``pods`` per interval)
    and what else runs on its own, per second and per heartbeat."""
    interval = parse_duration(args.heartbeat_interval)  # as the dev cluster reads it
    time.sleep(1.0)  # the initial binds' Events and echoes are done with
    cpu0, server0, began = cpu_seconds(scheduler_pid), cpu_seconds(server.pid), time.perf_counter()
    time.sleep(args.idle_seconds)
    cpu1, server1, seconds = cpu_seconds(scheduler_pid), cpu_seconds(server.pid), time.perf_counter() - began
    beats = pods / interval * seconds
    return {
        "seconds": round(seconds, 1),
        "heartbeats_per_second": round(pods / interval, 1),
        "scheduler_ms_per_second": round((cpu1 - cpu0) * 1000 / seconds, 1),
        "server_ms_per_second": round((server1 - server0) * 1000 / seconds, 1),
        "scheduler_us_per_heartbeat": round((cpu1 - cpu0) * 1e6 / beats, 1),
        "server_us_per_heartbeat": round((server1 - server0) * 1e6 / beats, 1),
    }


def scheduler_phase(server: ServerProcess, watcher: BindWatcher, http: Http, variant: Variant, args: argparse.Namespace,
                    tmp: Path) -> dict[str, Any]:
    initial = [f"init-{i}" for i in range(args.initial)]
    burst = [f"burst-{i}" for i in range(args.runs)]
    paced = [f"paced-{i}" for i in range(args.paced_runs)]
    create_runs(server.url, SCHED_NS, initial, creators=args.creators)
    flags = {k: v for k, v in variant.env if k.islower()}
    proc, metrics_url = start_scheduler(server.kubeconfig, tmp, workers=int(flags.get("workers", args.workers)), namespace=SCHED_NS, name=f"scheduler-{variant.label}",
                                          env={k: v for k, v in variant.env if not k.islower()})
    churn_stop = threading.Event()
    churn_log = {"unready": 0, "deleted": 0, "errors": 0}
    result: dict[str, Any] = {}
    try:
        if not wait_http_ok(metrics_url + "/readyz", 120):
            raise RuntimeError("the scheduler did not become ready")
        started = time.perf_counter()
        if not watcher.wait_all(SCHED_NS, initial, 300):
            raise RuntimeError("the scheduler did not bind the initial Runs")
        result["initial_seconds"] = round(time.perf_counter() - started, 2)
        result["rss_after_initial_kib"] = status_kib(proc.pid, "VmRSS")
        if args.idle_seconds > 0:
            result["idle"] = idle_phase(server, proc.pid, variant.pods, args)
        if variant.conflict:
            http.fault({"action": "conflict", "resource": "runs", "subresource": "status", "namespace": SCHED_NS,
                        "count": None, "probability": variant.conflict})
        churn = None
        if variant.churn:
            churn = threading.Thread(target=churn_loop, args=(http, variant.pods, churn_stop, args.churn_interval, churn_log), daemon=True)
            churn.start()
        profiler = start_profiler(proc.pid, args.profile, variant.label) if args.profile else None
        cpu0 = cpu_seconds(proc.pid)
        server_cpu0 = cpu_seconds(server.pid)
        sent = create_runs(server.url, SCHED_NS, burst, creators=args.creators)
        complete = watcher.wait_all(SCHED_NS, burst, args.timeout)
        cpu1 = cpu_seconds(proc.pid)
        server_cpu1 = cpu_seconds(server.pid)
        if profiler is not None:
            result["profile"] = stop_profiler(profiler)
        result["burst"] = burst_stats(sent, watcher)
        result["burst"]["complete"] = complete
        bound = result["burst"]["bound"]
        result["cpu_seconds_per_1000_binds"] = round((cpu1 - cpu0) / max(bound, 1) * 1000, 3)
        result["server_cpu_seconds_per_1000_binds"] = round((server_cpu1 - server_cpu0) / max(bound, 1) * 1000, 3)
        before_paced = scrape(metrics_url)
        sent_paced = create_runs(server.url, SCHED_NS, paced, creators=2, rate=args.paced_rate)
        watcher.wait_all(SCHED_NS, paced, 120)
        result["paced"] = burst_stats(sent_paced, watcher) | {"rate": args.paced_rate}
        result["paced"]["inside_scheduler_ms"] = paced_breakdown(before_paced, scrape(metrics_url))
        del result["paced"]["samples"]
        churn_stop.set()
        if churn is not None:
            churn.join()
        http.fault({"action": "clear"})
        # No leaked reservation: with faults and churn over, every Run must end up bound.
        everything = initial + burst + paced
        settled = watcher.wait_all(SCHED_NS, everything, args.settle)
        unbound = len(everything) - watcher.count(SCHED_NS, everything)
        result["unbound_after_settle"] = unbound
        result["settled"] = settled
        result["peak_rss_kib"] = status_kib(proc.pid, "VmHWM")
        result["rss_kib"] = status_kib(proc.pid, "VmRSS")
        metrics = scrape(metrics_url)
        result["metrics"] = {
            key.replace("kruntimes_scheduler_", ""): value
            for key, value in metrics.items()
            if key.startswith(("kruntimes_scheduler_reservation_conflicts_total", "kruntimes_scheduler_sync_total",
                               "kruntimes_scheduler_pending_run_wakeups_total"))
        }
        result["churn"] = churn_log if variant.churn else None
    finally:
        churn_stop.set()
        stop_process(proc)
    result["verify"] = verify(http, variant) if not args.no_verify else None
    return result


def run_variant(variant: Variant, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    capacity = max(2, -(-(args.initial + args.runs + args.paced_runs) * 2 // variant.pods))
    server = ServerProcess.start(
        tmp,
        ["--runtime", f"{SCHED_NS}/python={variant.pods}x{capacity}", "--event-window", "500000", "--auto-create-namespaces",
         "--heartbeat-interval", str(args.heartbeat_interval)],
        name=f"server-{variant.label}",
    )
    try:
        http = Http(server.url)
        wait_pods_ready(http, SCHED_NS, variant.pods)
        watcher = BindWatcher(server.url, http.resource_version(RUNS_PATH.format(ns=SCHED_NS)))
        watcher.start()
        watcher.ready.wait(10)
        out: dict[str, Any] = {"variant": variant.label.rsplit("@", 1)[0], "pods": variant.pods, "capacity_runs_per_pod": capacity,
                               "conflict": variant.conflict, "churn": variant.churn}
        out["floor_a"] = floor_phase(server, watcher, args, "floor-a", tmp)
        out["scheduler"] = scheduler_phase(server, watcher, http, variant, args, tmp)
        out["floor_b"] = floor_phase(server, watcher, args, "floor-b", tmp)
        watcher.stop()
        floor = (out["floor_a"]["runs_per_second"] + out["floor_b"]["runs_per_second"]) / 2
        out["floor_runs_per_second"] = round(floor, 1)
        out["ratio"] = round(out["scheduler"]["burst"]["runs_per_second"] / floor, 3) if floor else 0.0
        return out
    finally:
        server.stop()


def summary_line(r: dict[str, Any]) -> str:
    s = r["scheduler"]
    v = s.get("verify") or {}
    return (
        f"{r['variant']:>10} @ {r['pods']:>4} pods: {s['burst']['runs_per_second']:7.1f} Runs/s vs floor "
        f"{r['floor_runs_per_second']:7.1f} = {r['ratio']:.2f}x; burst p50/p99 {s['burst']['latency_ms']['p50']:.0f}/"
        f"{s['burst']['latency_ms']['p99']:.0f} ms; paced@{s['paced']['rate']:g}/s p50/p99 "
        f"{s['paced']['latency_ms']['p50']:.1f}/{s['paced']['latency_ms']['p99']:.1f} ms; "
        f"{s['cpu_seconds_per_1000_binds']:.2f} CPU-s/1k binds; "
        + (f"idle {s['idle']['scheduler_us_per_heartbeat']:.0f}/{s['idle']['server_us_per_heartbeat']:.0f} us per heartbeat "
           f"(scheduler/server); " if "idle" in s else "")
        + f"peak RSS {s['peak_rss_kib'] / 1024:.0f} MiB; "
        f"unbound {s['unbound_after_settle']}; verify {'ok' if v.get('ok') else v.get('violations', 'skipped')}"
    )


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 2.6 * len(results)), squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        for label, samples, style in (
            ("scheduler", r["scheduler"]["burst"]["samples"], "-"),
            ("floor A", r["floor_a"]["samples"], ":"),
            ("floor B", r["floor_b"]["samples"], "--"),
        ):
            ax.plot(range(len(samples)), samples, style, label=label)
        ax.set_title(f"{r['variant']} @ {r['pods']} pods: {r['ratio']:.2f}x floor", fontsize=9)
        ax.set_ylabel("binds/s")
        ax.legend(fontsize=7, loc="lower right")
        ax.set_ylim(bottom=0)
    axes[-1, 0].set_xlabel("seconds since the burst's first create")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main_any_server(args: argparse.Namespace) -> int:
    from _e2e_any import run_any_server, summary_line as any_line
    from _servers import start_server, write_report
    from _wide import parse_trees

    if args.variants not in ("base", "base,conflict1,conflict10,churn", "base,conflict10"):
        raise SystemExit("--server runs the base variant only (faults, churn and the write history need the dev cluster)")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kruntimes-e2e-") as tmp:
        server = start_server(args.server, Path(tmp), scheduler_kubeconfig=args.scheduler_kubeconfig)
        try:
            out = run_any_server(server, [int(p) for p in args.pods.split(",") if p], parse_trees(args.scheduler_src), args, Path(tmp))
        finally:
            server.stop()
    write_report("e2e", args, began, machine(), out)
    floor = out["floor"]
    print(f"floor on {out['server']['version']}: {floor['patches_per_second']:.0f} status patches/s, paced "
          f"{args.paced_rate:g}/s p99 {floor['paced_patch_p99_ms']:.1f} ms; load average "
          f"{out['loadavg_before'][0]:.1f} -> {out['loadavg_after'][0]:.1f}")
    for r in out["results"]:
        print(any_line(r))
    return 1 if any(r["unbound"] or r["overcommitted_pods"] for r in out["results"]) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, three variants (< 2 min)")
    parser.add_argument("--pods", default="100,1000", help="Runtime Pod counts, comma-separated (default 100,1000)")
    parser.add_argument("--variants", default="base,conflict1,conflict10,churn",
                        help="at the first pod count; only base[+ENV=VALUE] ones run at the others (default all four)")
    parser.add_argument("--initial", type=int, default=1000, help="Runs present before the scheduler starts (default 1000)")
    parser.add_argument("--runs", type=int, default=10_000, help="Runs in the burst (default 10000)")
    parser.add_argument("--floor-runs", type=int, default=5000, help="Runs in each floor burst (default 5000)")
    parser.add_argument("--paced-runs", type=int, default=1000, help="Runs created at --paced-rate for latency (default 1000)")
    parser.add_argument("--paced-rate", type=float, default=100.0, help="Runs/s of the paced phase (default 100)")
    parser.add_argument("--workers", type=int, default=4, help="scheduler workers = floor threads (default 4)")
    parser.add_argument("--creators", type=int, default=4, help="creator threads (default 4)")
    parser.add_argument("--heartbeat-interval", default="5s", help="the simulator's pod heartbeat (default 5s)")
    parser.add_argument("--idle-seconds", type=float, default=10.0,
                        help="after the initial Runs, read both processes' CPU this long with nothing created: "
                             "the cost of the pods' heartbeats (default 10 = two heartbeat waves; 0 skips)")
    parser.add_argument("--churn-interval", type=float, default=0.5, help="seconds between pod churn actions (default 0.5)")
    parser.add_argument("--timeout", type=float, default=300.0, help="longest wait for a burst to be bound (default 300 s)")
    parser.add_argument("--settle", type=float, default=45.0, help="longest wait for every Run to be bound at the end")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the scheduler during each burst; collapsed stacks go here")
    parser.add_argument("--no-verify", action="store_true", help="skip the write-history replay")
    parser.add_argument("--plot", type=Path, help="write a PNG of per-second throughput here")
    parser.add_argument("--json-out", type=Path, help="also write the JSON result here")
    parser.add_argument("--server", help="run on this server with the runtime simulator's pods and floor.py's floor "
                        "(the base variant only; benchmarks/_e2e_any.py): dev, real, or a kubeconfig")
    parser.add_argument("--scheduler-kubeconfig", type=Path, help="with --server PATH: the scheduler's credentials")
    parser.add_argument("--scheduler-src", action="append", metavar="LABEL=DIR",
                        help="with --server: also run the scheduler of another tree (PYTHONPATH=DIR), alternating; repeatable")
    parser.add_argument("--repeat", type=int, default=1, help="with --server: runs per pod count and tree (default 1)")
    parser.add_argument("--floor-seconds", type=float, default=8.0, help="with --server: seconds per floor step (default 8)")
    parser.add_argument("--floor-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--expect", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor_worker:
        args.pods = int(args.pods)
        return floor_worker(args)
    if args.quick:
        args.initial, args.runs, args.floor_runs, args.paced_runs = 300, 2000, 1500, 300
    if args.server is not None:
        return main_any_server(args)
        if args.variants == parser.get_default("variants"):
            args.variants = "base,conflict10"
        args.settle = 35.0
    sys.setswitchinterval(0.001)  # the watcher's receive times should not wait 5 ms for the creators' GIL
    shorten_pauses()  # nor for a full collection over every Run this process created
    pods = [int(p) for p in args.pods.split(",") if p]
    names = [v for v in args.variants.split(",") if v]
    variants: list[Variant] = []
    for i, count in enumerate(pods):
        for name in names if i == 0 else [n for n in names if n.split("+")[0] == "base"]:
            base, *switches = name.split("+")
            if base not in VARIANTS or not all("=" in sw for sw in switches):
                parser.error(f"unknown variant {name!r} (choose from {', '.join(VARIANTS)}, optionally +ENV=VALUE...)")
            env = tuple((key, value) for key, _, value in (sw.partition("=") for sw in switches))
            variants.append(Variant(base, count, {"conflict1": 0.01, "conflict10": 0.10}.get(base, 0.0), base == "churn", env))
    began = time.monotonic()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kruntimes-e2e-") as tmp:
        for variant in variants:
            print(f"# {variant.label} ...", file=sys.stderr, flush=True)
            results.append(run_variant(variant, args, Path(tmp)))
            print("# " + summary_line(results[-1]), file=sys.stderr, flush=True)
    document = {
        "benchmark": "e2e",
        "machine": machine(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if not k.startswith(("floor_worker", "kubeconfig", "namespace", "threads", "expect"))},
        "wall_seconds": round(time.monotonic() - began, 1),
        "results": results,
    }
    text = json.dumps(document, indent=1)
    print(text)
    if args.json_out is not None:
        args.json_out.write_text(text)
    if args.plot is not None:
        plot(results, args.plot)
    for r in results:
        print(summary_line(r))
    failed = [r for r in results if r["scheduler"]["unbound_after_settle"] or (r["scheduler"]["verify"] and not r["scheduler"]["verify"]["ok"])]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
