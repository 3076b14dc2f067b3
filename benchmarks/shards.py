"""Sharded mode: replicas that split namespaces through Leases, against one replica, and under kills and pauses.

    .venv/bin/python benchmarks/shards.py                      # ~8 min: 2 x (single, sharded), even, chaos
    .venv/bin/python benchmarks/shards.py --repeat 1 --cycles 4
    .venv/bin/python benchmarks/shards.py --out shards.json

Processes (no shared GIL, CPU from /proc): the dev API server (``python -m kruntimes.devcluster
--execute-runs 1s``; its simulator keeps every Runtime Pod Running, Ready and heart-beating and
finishes each bound Run after a second), the schedulers, and this load generator. Every phase has
a fresh server with 40 namespaces, one Runtime of ``python`` pods (2 slots each) in each.

Phases:

* ``single``: one replica in the default single-leader mode (``--leader-elect``, all namespaces);
  once it leads, a burst of Runs (5 per slot, 1 slot each) in every namespace; until every Run
  has Succeeded. Namespaces of *mixed* sizes: 1, 1, 1, 2, 2, 3, 5, 8 pods, repeated.
* ``sharded``: the same workload, four replicas ``--shard-by-namespace --shard-group bench`` sharing
  every namespace the API server lists (the 40, the Lease namespace and the four a new cluster
  has; each replica watches what it holds through one query per kind), or with
  ``--namespace-flags`` exactly the 40 (``--namespace`` each: a watch per namespace and kind); the
  burst starts once a live replica holds every namespace. ``single`` and ``sharded`` alternate,
  ``--repeat`` times each.
* ``alone`` (with ``pairs``): after each ``sharded``, one single-leader scheduler given only the
  namespaces of the replica that spent the most CPU per bind, the same burst in them. It separates
  the two halves of that replica's excess over ``single``: against ``alone`` (the same work at the
  same event rate, one process on the CPU), what running as one of several replicas adds; ``alone``
  against ``single``, what a scheduler of those namespaces only pays per bind (per thread, below:
  mostly its Events, which the single replica's bigger burst mostly does without).
* ``even``: ``sharded`` with 40 namespaces of 3 pods each: binds per replica against an even share.
* ``chaos``: ``sharded`` (mixed), the burst and then a paced trickle of Runs, and ``--cycles`` cycles
  (half SIGKILL, half SIGSTOP, shuffled) of a random live replica once the namespaces are balanced:
  at the signal one probe Run is created in each of the 40 namespaces the victim held (so each has
  pending work); a killed replica is restarted (new identity) once every probe got a write, a
  stopped one is SIGCONTed after ``lease + 2 s``. Then every replica is restarted or resumed, every Run finishes,
  the replicas get SIGTERM, and the whole write history goes through ``kruntimes.verify``.

Figures:

* violations: the checker's counts (``capacity`` = overcommit, ``double_bind``, ``shard_owner`` = a
  write by a replica that did not own its namespace at that point of the commit order, hence also
  two writers; ``final_state``, ``write_discipline``). Writes a paused replica had composed before
  its SIGSTOP and that committed right after its SIGCONT are listed apart (``in_flight_at_pause``,
  docs/reliability.md), never dropped silently.
* rebalance (chaos): per cycle and per namespace of the 40 the victim held, signal -> first
  scheduler write in that namespace by another identity (history times); max and p50 over all, against lease duration
  + one retry period. Also signal -> the assignment Lease written to another holder (``takeover``),
  and signal -> the new owner's "namespace open" log line (``open``: its informers synced and the
  backlog queued). The first write waits for room too: where every pod of a namespace is busy at
  the takeover, nothing is written there until a Run ends, so ``open`` is the handoff alone.
* binds per replica: from the history (User-Agent of each bind); ``even``: largest deviation from
  an even share (target within 25 %).
* cycles: the sum over replicas of ``kruntimes_scheduler_sync_total`` (every result) from each
  process's /metrics (scraped just before a SIGKILL and before the final SIGTERM), per bind, against
  ``single`` on the same workload (target <= 1.05x).
* CPU: utime + stime of each replica (/proc/<pid>/stat) from the burst to the last Run's end, per
  bind it made, against ``single`` (target <= 1.1x: the worst replica and the mean). Before the burst,
  each replica's CPU over ``IDLE_WINDOW`` seconds with its namespaces taken and no Run
  (``idle_cpu_ms_per_s``, at the /proc tick's 10 ms resolution): the fixed cost of a replica.

* per thread (the scheduler names its threads in the kernel; ``/proc/PID/task/*/schedstat`` at the
  burst and at the end): µs of CPU per bind of each kind of thread (and, in the JSON, its voluntary
  switches per bind: one wake-up each), for the single replica, the
  costliest replica and ``alone``; and the same ratios without the Event writer, whose cost per bind
  follows the Event budget (a single replica's burst outgrows it and most binds get no Event; a
  replica with few binds spends its share on nearly every one), not the scheduling.

Placement (``--placement``, default ``split``, as in ``backlog.py``): the schedulers run on one CPU
and the dev cluster with this harness on the others, so ``single`` has that CPU to itself and the
replicas of ``sharded`` share it; ``shared`` lets every process use every CPU. ``spread`` gives
each replica a CPU of its own (slot i on the i-th CPU; ``single`` and ``alone`` on the first), as
replicas on a cluster's nodes have: what a replica costs without the core it shares with the
others under ``split``. It needs ``--replicas`` + 1 CPUs and falls back to ``split`` with fewer
(the JSON's ``placement`` says what was asked and what ran). ``apart`` measures what ``spread`` does
with two CPUs, one replica at a time: in the i-th pair the replica of slot i (mod ``--replicas``)
has the schedulers' CPU to itself and the other replicas share the rest with the dev cluster and
this harness; the comparison then takes that replica (``measured`` in the phase) rather than the
costliest, and ``alone`` its namespaces. ``--repeat 4`` measures each of four replicas once.

Prints one JSON object (also to ``--out``), then a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import (  # noqa: E402
    in_parallel,
    ALL_RUNS_PATH,
    JSON_HEADERS,
    RUNS_PATH,
    VENV_BIN,
    PLACEMENTS,
    Http,
    Placement,
    ServerProcess,
    context_switches,
    cpu_seconds,
    free_port,
    machine,
    percentile,
    run_body,
    scrape,
    stop_process,
    thread_cpu,
    threads_per_bind,
    wait_pods_ready,
)

from kruntimes.verify import SHARD_GROUP_LABEL, SHARD_NAMESPACE_LABEL, SHARD_ROLE_LABEL, CheckOptions, check_history, records_from_json  # noqa: E402

NAMESPACES: Final = 40
MIXED_PODS: Final = (1, 1, 1, 2, 2, 3, 5, 8)
EVEN_PODS: Final = 3
SLOTS: Final = 2
RUNS_PER_SLOT: Final = 5
GROUP: Final = "bench"
LEASE_NS: Final = "default"
WORKERS: Final = 4
IDLE_WINDOW: Final = 3.0
"""Seconds of CPU measured with every namespace taken and no Run: the fixed cost of a replica."""
CYCLES_METRIC: Final = "kruntimes_scheduler_sync_total"
LEASES_PATH: Final = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases"


def namespaces(pods: Sequence[int]) -> dict[str, int]:
    return {f"ns-{i:02d}": pods[i % len(pods)] for i in range(NAMESPACES)}


# --- replicas ----------------------------------------------------------------------------------------


@dataclass
class Replica:
    """One scheduler process (one identity); its last CPU and cycle readings stay after it is gone."""

    identity: str
    proc: subprocess.Popen[bytes]
    metrics: str
    cpu_from: float = 0.0
    cpu: float = 0.0
    switches_from: int = 0
    switches: int = 0
    cycles: float = 0.0
    stopped: bool = False
    idle_ms_per_s: float | None = None
    threads_from: dict[str, tuple[int, int]] = field(default_factory=dict)
    threads: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Kind of thread -> (ns on the CPU, voluntary switches), at the burst and at the last reading."""

    def read(self) -> None:
        """Take the process's CPU and cycle counter now (while it runs)."""
        try:
            self.cpu = cpu_seconds(self.proc.pid)
            self.switches = context_switches(self.proc.pid)
            self.threads = thread_cpu(self.proc.pid)
            self.cycles = sum(v for k, v in scrape(self.metrics).items() if k.startswith(CYCLES_METRIC))
        except (OSError, urllib3.exceptions.HTTPError):
            pass


@dataclass
class Fleet:
    kubeconfig: Path
    tmp: Path
    lease: tuple[float, float, float]
    sharded: bool
    namespaces: Sequence[str]
    slots: list[Replica | None] = field(default_factory=list)
    every: list[Replica] = field(default_factory=list)
    generation: int = 0
    placement: Placement | None = None
    listed: bool = False
    """Sharded replicas get the namespaces with ``--namespace`` (a watch per namespace and kind);
    else they share every namespace the API server lists (three watches each), as deployed."""

    def start(self, slot: int) -> Replica:
        self.generation += 1
        identity = f"r{slot}g{self.generation}"
        port = free_port()
        duration, deadline, retry = self.lease
        argv = [
            str(VENV_BIN / "kruntimes"), "scheduler", "--kubeconfig", str(self.kubeconfig), "--workers", str(WORKERS),
            "--metrics-bind-address", f"127.0.0.1:{port}", "--health-probe-bind-address", f"127.0.0.1:{port}",
            "--log-format", "json", "--log-level", "info", "--leader-elect", "--leader-elect-resource-namespace", LEASE_NS,
            "--leader-elect-lease-duration", f"{round(duration * 1000)}ms", "--leader-elect-renew-deadline", f"{round(deadline * 1000)}ms",
            "--leader-elect-retry-period", f"{round(retry * 1000)}ms", "--leader-elect-identity", identity,
        ]
        if self.sharded:
            argv += ["--shard-by-namespace", "--shard-group", GROUP]
            for ns in self.namespaces if self.listed else ():
                argv += ["--namespace", ns]
        log = open(self.tmp / f"scheduler-{identity}.log", "wb")  # noqa: SIM115 (the process owns it)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        if self.placement is not None:
            self.placement.place_scheduler(proc.pid, slot)
        replica = Replica(identity, proc, f"http://127.0.0.1:{port}")
        while len(self.slots) <= slot:
            self.slots.append(None)
        self.slots[slot] = replica
        self.every.append(replica)
        return replica

    def live(self) -> list[int]:
        return [i for i, r in enumerate(self.slots) if r is not None and not r.stopped]

    def live_identities(self) -> set[str]:
        return {r.identity for r in self.slots if r is not None and not r.stopped}

    def kill(self, slot: int) -> Replica:
        replica = self.slots[slot]
        assert replica is not None
        replica.read()
        replica.proc.send_signal(signal.SIGKILL)
        replica.proc.wait(10)
        self.slots[slot] = None
        return replica

    def stop_all(self) -> None:
        for replica in self.slots:
            if replica is not None:
                if replica.stopped:
                    replica.proc.send_signal(signal.SIGCONT)
                    replica.stopped = False
                replica.read()
        for replica in self.slots:
            if replica is not None:
                stop_process(replica.proc, 30)
        self.slots = []

    def kill_all(self) -> None:
        for replica in self.every:
            if replica.proc.poll() is None:
                replica.proc.send_signal(signal.SIGCONT)
                replica.proc.kill()
                replica.proc.wait(5)


def shard_leases(http: Http) -> tuple[dict[str, str], dict[str, str]]:
    """(namespace -> assignment holder, member Lease name -> holder) of the bench group."""
    assignments: dict[str, str] = {}
    members: dict[str, str] = {}
    for obj in http.ok("GET", LEASES_PATH)["items"]:
        labels = obj["metadata"].get("labels") or {}
        if labels.get(SHARD_GROUP_LABEL) != GROUP:
            continue
        holder = str((obj.get("spec") or {}).get("holderIdentity") or "")
        if labels.get(SHARD_ROLE_LABEL) == "assignment":
            assignments[str(labels.get(SHARD_NAMESPACE_LABEL, ""))] = holder
        elif labels.get(SHARD_ROLE_LABEL) == "member":
            members[obj["metadata"]["name"]] = holder
    return assignments, members


def wait_balanced(http: Http, fleet: Fleet, timeout: float) -> bool:
    """Every namespace shared held by a live replica, none holding more than its share (ceil(N / live));
    shared: the benchmark's, or (without ``--namespace``) every namespace the API server lists."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = fleet.live_identities()
        holders, _ = shard_leases(http)
        shared = fleet.namespaces if fleet.listed else [str(ns["metadata"]["name"]) for ns in http.ok("GET", "/api/v1/namespaces")["items"]]
        per = Counter(holders.get(ns, "") for ns in shared)
        bound = -(-len(shared) // max(len(live), 1))
        if set(per) <= live and all(n <= bound for n in per.values()):
            return True
        time.sleep(0.2)
    return False


def wait_leader(http: Http, identity: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, obj = http.call("GET", f"{LEASES_PATH}/kruntimes-scheduler")
        if status == 200 and (obj.get("spec") or {}).get("holderIdentity") == identity:
            return True
        time.sleep(0.1)
    return False


# --- load ----------------------------------------------------------------------------------------------


def create(url: str, runs: Sequence[tuple[str, str]], creators: int = 4) -> None:
    errors: list[str] = []

    def creator(index: int) -> None:
        pool = urllib3.PoolManager(retries=False, maxsize=1, timeout=urllib3.Timeout(connect=10, read=120))
        for ns, name in runs[index::creators]:
            resp = pool.request("POST", url + RUNS_PATH.format(ns=ns), body=run_body(ns, name), headers=JSON_HEADERS)
            if resp.status != 201:
                errors.append(f"{resp.status} {resp.data[:200]!r}")

    in_parallel(creators, creator, errors)


def burst_of(sizes: dict[str, int], prefix: str = "b") -> list[tuple[str, str]]:
    runs = [(ns, f"{prefix}-{i:04d}") for ns, pods in sizes.items() for i in range(pods * SLOTS * RUNS_PER_SLOT)]
    random.Random(5).shuffle(runs)
    return runs


def phases(http: Http) -> Counter[str]:
    return Counter(str((r.get("status") or {}).get("phase") or "Pending") for r in http.ok("GET", ALL_RUNS_PATH)["items"])


def wait_finished(http: Http, total: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if phases(http)["Succeeded"] >= total:
            return True
        time.sleep(1.0)
    return False


# --- one phase ---------------------------------------------------------------------------------------------


def start_server(tmp: Path, sizes: dict[str, int], label: str) -> ServerProcess:
    runtimes = [a for ns, pods in sizes.items() for a in ("--runtime", f"{ns}/python={pods}x{SLOTS}")]
    return ServerProcess.start(tmp, [*runtimes, "--execute-runs", "1s", "--event-window", "1000000", "--auto-create-namespaces",
                                     "--heartbeat-interval", "5s"], name=f"server-{label}")


def bind_writes(items: Sequence[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """(scheduler identity, namespace) of every bind in the write history."""
    for i in items:
        agent = str(i.get("userAgent", ""))
        if (i.get("resource") == "runs" and i.get("subresource") == "status" and agent.startswith("kruntimes-scheduler/")
                and ((i.get("object") or {}).get("status") or {}).get("phase") == "Scheduled"):
            yield agent.partition("/")[2], str(i.get("namespace", ""))


def binds_by_writer(items: Sequence[dict[str, Any]]) -> Counter[str]:
    return Counter(identity for identity, _ in bind_writes(items))


def namespaces_by_writer(items: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """The namespaces each scheduler identity bound in."""
    out: dict[str, set[str]] = {}
    for identity, namespace in bind_writes(items):
        out.setdefault(identity, set()).add(namespace)
    return {k: sorted(v) for k, v in out.items()}


def figures(fleet: Fleet, items: Sequence[dict[str, Any]], seconds: float) -> dict[str, Any]:
    binds = binds_by_writer(items)
    owned = namespaces_by_writer(items)
    total = sum(binds.values())
    cycles = sum(r.cycles for r in fleet.every)
    per_thread = {r.identity: threads_per_bind(r.threads_from, r.threads, binds.get(r.identity, 0)) for r in fleet.every}
    replicas = {
        r.identity: {"binds": binds.get(r.identity, 0), "cycles": r.cycles, "cpu_s": round(r.cpu - r.cpu_from, 2),
                     "cpu_ms_per_bind": round((r.cpu - r.cpu_from) * 1000 / binds[r.identity], 3) if binds.get(r.identity) else None,
                     "idle_cpu_ms_per_s": r.idle_ms_per_s,
                     "switches_per_bind": round((r.switches - r.switches_from) / binds[r.identity], 1) if binds.get(r.identity) else None,
                     "threads_us_per_bind": {kind: f["us"] for kind, f in per_thread[r.identity].items()},
                     "threads_switches_per_bind": {kind: f["switches"] for kind, f in per_thread[r.identity].items()},
                     "namespaces": owned.get(r.identity, [])}
        for r in fleet.every
    }
    return {"binds": total, "cycles": cycles, "cycles_per_bind": round(cycles / max(total, 1), 3),
            "cpu_s": round(sum(r.cpu - r.cpu_from for r in fleet.every), 2), "seconds": round(seconds, 1), "replicas": replicas}


def clean_phase(label: str, sizes: dict[str, int], replicas: int, args: argparse.Namespace, tmp: Path,
                measured: int = 0) -> dict[str, Any]:
    """``single`` (replicas == 1, single-leader) or ``sharded``/``even``: start, burst, drain; no faults.
    Under ``--placement apart`` the replica of slot ``measured`` is the one on a CPU of its own."""
    server = start_server(tmp, sizes, label)
    placement: Placement = args.placement.measuring(measured)
    fleet = Fleet(server.kubeconfig, tmp, args.lease, replicas > 1, sorted(sizes), placement=placement,
                  listed=args.namespace_flags)
    try:
        http = Http(server.url)
        for ns, pods in sizes.items():
            wait_pods_ready(http, ns, pods)
        for slot in range(replicas):
            fleet.start(slot)
        if replicas == 1:
            ready = wait_leader(http, fleet.every[0].identity, 120)
        else:
            ready = wait_balanced(http, fleet, 120)
        if not ready:
            raise RuntimeError(f"{label}: the replicas did not take the namespaces")
        time.sleep(1.0)  # the last owner's lists
        idle_from = {r.identity: cpu_seconds(r.proc.pid) for r in fleet.every}
        time.sleep(IDLE_WINDOW)
        for r in fleet.every:
            r.cpu_from = cpu_seconds(r.proc.pid)
            r.switches_from = context_switches(r.proc.pid)
            r.threads_from = thread_cpu(r.proc.pid)
            r.idle_ms_per_s = round((r.cpu_from - idle_from[r.identity]) * 1000 / IDLE_WINDOW, 2)
        burst = burst_of(sizes)
        began = time.monotonic()
        create(server.url, burst)
        complete = wait_finished(http, len(burst), args.timeout)
        seconds = time.monotonic() - began
        apart = fleet.slots[measured] if placement.mode == "apart" and replicas > 1 else None
        fleet.stop_all()
        items = http.ok("GET", "/_devcluster/history")["items"]
        out = {"phase": label, "replicas": replicas, "runs": len(burst), "complete": complete} | figures(fleet, items, seconds)
        if apart is not None:
            out["measured"] = apart.identity
        report = check_history(records_from_json(items), CheckOptions())
        out["violations"] = report.counts()
        out["first_violations"] = report.summary()["first_violations"][:5]
        return out
    finally:
        fleet.kill_all()
        server.stop()


def chaos_phase(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from tests.chaos.harness import in_flight_at_pause

    sizes = namespaces(MIXED_PODS)
    server = start_server(tmp, sizes, "chaos")
    fleet = Fleet(server.kubeconfig, tmp, args.lease, True, sorted(sizes), placement=args.placement,
                  listed=args.namespace_flags)
    rng = random.Random(args.seed)
    duration, _, retry = args.lease
    stop = threading.Event()
    cycles: list[dict[str, Any]] = []
    pauses: list[tuple[str, float, float]] = []
    try:
        http = Http(server.url)
        for ns, pods in sizes.items():
            wait_pods_ready(http, ns, pods)
        for slot in range(args.replicas):
            fleet.start(slot)
        if not wait_balanced(http, fleet, 120):
            raise RuntimeError("chaos: the replicas did not take the namespaces")
        burst = burst_of(sizes)
        create(server.url, burst)
        trickled: list[tuple[str, str]] = []

        def trickle() -> None:
            names = sorted(sizes)
            i = 0
            while not stop.wait(1.0 / args.trickle):
                run = (names[i % len(names)], f"t-{i:05d}")
                try:
                    create(server.url, [run], creators=1)
                    trickled.append(run)
                except (RuntimeError, urllib3.exceptions.HTTPError):
                    pass
                i += 1

        trickler = threading.Thread(target=trickle, daemon=True)
        trickler.start()
        plan = ["sigkill", "sigstop"] * (args.cycles // 2) + ["sigkill"] * (args.cycles % 2)
        rng.shuffle(plan)
        probes = 0
        for number, action in enumerate(plan):
            balanced = wait_balanced(http, fleet, 30)
            time.sleep(rng.uniform(0.5, 1.5))
            slot = rng.choice(fleet.live())
            victim = fleet.slots[slot]
            assert victim is not None
            # the benchmark's namespaces (with pods): in one without, a probe waits for the safety
            # net, not for the handoff (the replicas share the cluster's own namespaces too)
            held = sorted(ns for ns, holder in shard_leases(http)[0].items() if holder == victim.identity and ns in sizes)
            at = time.time()
            if action == "sigkill":
                fleet.kill(slot)
            else:
                victim.proc.send_signal(signal.SIGSTOP)
                victim.stopped = True
            names = [(ns, f"p{number:02d}-{ns}") for ns in held]
            create(server.url, names, creators=2)
            probes += len(names)
            deadline = time.monotonic() + 3 * duration + 5
            while time.monotonic() < deadline and not all(probe_written(http, ns, name) for ns, name in names):
                time.sleep(0.2)
            if action == "sigkill":
                fleet.start(slot)
            else:
                time.sleep(max(0.0, at + duration + 2.0 - time.time()))
                victim.proc.send_signal(signal.SIGCONT)
                victim.stopped = False
                pauses.append((victim.identity, at, time.time()))
            cycles.append({"cycle": number, "action": action, "victim": victim.identity, "at": at, "held": held,
                           "balanced_before": balanced})
        stop.set()
        trickler.join()
        wait_balanced(http, fleet, 30)
        total = len(burst) + len(trickled) + probes
        complete = wait_finished(http, total, args.timeout)
        fleet.stop_all()
        items = http.ok("GET", "/_devcluster/history")["items"]
        records = records_from_json(items)
        report = check_history(records, CheckOptions())
        in_flight = in_flight_at_pause(list(records), report, pauses)
        rebalance, takeover = rebalance_times(items, cycles)
        opened = open_times(opened_namespaces(tmp, fleet), cycles)
        flat_open = [s for c in opened for s in c.values()]
        flat = [s for c in rebalance for s in c.values()]
        flat_takeover = [s for c in takeover for s in c.values()]
        missing = sum(len(c["held"]) - len(r) for c, r in zip(cycles, rebalance))
        out = {"phase": "chaos", "replicas": args.replicas, "runs": total, "complete": complete,
               "violations": {k: v - sum(1 for x in in_flight if x.invariant == k) for k, v in report.counts().items()},
               "first_violations": [str(v) for v in report.violations if v not in in_flight][:10],
               "in_flight_at_pause": [str(v) for v in in_flight],
               "checked": dict(report.checked),
               "rebalance_s": {"max": round(max(flat, default=0.0), 2), "p50": round(percentile(flat, 0.5), 2), "n": len(flat),
                               "never": missing, "target": round(duration + retry, 2)},
               "takeover_s": {"max": round(max(flat_takeover, default=0.0), 2), "p50": round(percentile(flat_takeover, 0.5), 2)},
               "open_s": {"max": round(max(flat_open, default=0.0), 2), "p50": round(percentile(flat_open, 0.5), 2), "n": len(flat_open),
                          "never": sum(len(c["held"]) - len(o) for c, o in zip(cycles, opened))},
               "cycles_detail": [{k: v for k, v in c.items() if k != "at"}
                                 | {"rebalance_s": {ns: round(s, 2) for ns, s in r.items()},
                                    "takeover_s": {ns: round(s, 2) for ns, s in t.items()},
                                    "open_s": {ns: round(s, 2) for ns, s in o.items()}}
                                 for c, r, t, o in zip(cycles, rebalance, takeover, opened)]}
        return out | figures(fleet, items, 0.0)
    finally:
        stop.set()
        fleet.kill_all()
        server.stop()


def probe_written(http: Http, namespace: str, name: str) -> bool:
    status, obj = http.call("GET", RUNS_PATH.format(ns=namespace) + "/" + name)
    return status == 200 and bool((obj.get("status") or {}).get("phase") not in (None, "", "Pending") or (obj.get("status") or {}).get("message"))


def opened_namespaces(tmp: Path, fleet: Fleet) -> list[tuple[float, str, str]]:
    """``(time, identity, namespace)`` of every "namespace open" line in the replicas' logs: the
    instant an owner starts scheduling a namespace (its informers synced, its backlog queued)."""
    found: list[tuple[float, str, str]] = []
    for replica in fleet.every:
        path = tmp / f"scheduler-{replica.identity}.log"
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if '"namespace open"' not in line:
                continue
            try:
                record = json.loads(line)
                moment = datetime.strptime(str(record["time"]), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
            except (ValueError, KeyError):
                continue
            found.append((moment.timestamp(), replica.identity, str(record.get("namespace", ""))))
    return sorted(found)


def open_times(opened: Sequence[tuple[float, str, str]], cycles: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """Per cycle: namespace -> seconds from the signal to the first "namespace open" there by another
    identity. Unlike the first write, it does not wait for room: an owner that opened a namespace
    whose pods are all busy writes nothing until a Run ends."""
    out: list[dict[str, float]] = []
    for cycle in cycles:
        at, victim, held = cycle["at"], cycle["victim"], set(cycle["held"])
        first: dict[str, float] = {}
        for t, identity, ns in opened:
            if t >= at and identity != victim and ns in held and ns not in first:
                first[ns] = t - at
        out.append(first)
    return out


def rebalance_times(items: Sequence[dict[str, Any]], cycles: Sequence[dict[str, Any]]) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Per cycle: namespace -> seconds from the signal to the first scheduler write there by another
    identity (not a Lease); and to the assignment Lease's first version naming another holder."""
    writes: list[dict[str, float]] = []
    takes: list[dict[str, float]] = []
    for cycle in cycles:
        at, victim, held = cycle["at"], cycle["victim"], set(cycle["held"])
        first: dict[str, float] = {}
        taken: dict[str, float] = {}
        for item in items:
            t = float(item.get("time", 0.0))
            if t < at:
                continue
            agent = str(item.get("userAgent", ""))
            identity = agent.partition("/")[2]
            if item.get("resource") == "leases":
                labels = ((item.get("object") or {}).get("metadata") or {}).get("labels") or {}
                ns = str(labels.get(SHARD_NAMESPACE_LABEL, ""))
                holder = str(((item.get("object") or {}).get("spec") or {}).get("holderIdentity") or "")
                if labels.get(SHARD_ROLE_LABEL) == "assignment" and ns in held and holder not in ("", victim) and ns not in taken:
                    taken[ns] = t - at
            elif agent.startswith("kruntimes-scheduler/") and identity != victim:
                ns = str(item.get("namespace", ""))
                if ns in held and ns not in first:
                    first[ns] = t - at
        writes.append(first)
        takes.append(taken)
    return writes, takes


# --- the whole ----------------------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def compare(singles: Sequence[dict[str, Any]], sharded: Sequence[dict[str, Any]], alone: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sharded against single on the same workload, pairing the runs in the order they alternated;
    and, where ``alone`` ran, the worst replica against one scheduler given that replica's namespaces."""
    pairs = []
    for index, (one, many) in enumerate(zip(singles, sharded)):
        single_cpu = one["cpu_s"] / max(one["binds"], 1) * 1000
        per_replica = [r["cpu_ms_per_bind"] for r in many["replicas"].values() if r["cpu_ms_per_bind"] is not None]
        worst = subject(many)
        pair: dict[str, Any] = {
            "subject": f"{many['measured']}, on a CPU of its own" if "measured" in many else "the costliest replica",
            "cycles_ratio": ratio(many["cycles_per_bind"], one["cycles_per_bind"]),
            "cpu_ms_per_bind_single": round(single_cpu, 3),
            "cpu_ms_per_bind_replicas": per_replica,
            "cpu_ratio_worst_replica": ratio(worst["cpu_ms_per_bind"], single_cpu),
            "cpu_ratio_mean_replica": ratio(sum(per_replica) / len(per_replica) if per_replica else None, single_cpu),
            "cpu_ratio_total": ratio(many["cpu_s"] / max(many["binds"], 1) * 1000, single_cpu),
            "threads_us_per_bind": {"single": only(one)["threads_us_per_bind"], "worst_replica": worst["threads_us_per_bind"]},
            "cpu_ratio_worst_replica_without_events": ratio(without_events(worst), without_events(only(one))),
        }
        if index < len(alone):
            by_itself = alone[index]["cpu_s"] / max(alone[index]["binds"], 1) * 1000
            scheduler = only(alone[index])
            pair["threads_us_per_bind"]["alone"] = scheduler["threads_us_per_bind"]
            pair |= {
                "cpu_ms_per_bind_alone": round(by_itself, 3),
                "cpu_ratio_worst_replica_alone": ratio(worst["cpu_ms_per_bind"], by_itself),
                "cpu_ratio_alone_single": ratio(by_itself, single_cpu),
                "cpu_ratio_worst_replica_alone_without_events": ratio(without_events(worst), without_events(scheduler)),
                "cpu_ratio_alone_single_without_events": ratio(without_events(scheduler), without_events(only(one))),
            }
        pairs.append(pair)
    return {"pairs": pairs}


EVENT_WRITER: Final = "event-recorder"


def without_events(replica: dict[str, Any]) -> float | None:
    """µs per bind of every thread but the Event writer: Events are kept within a budget (the group's,
    sharded), so their cost per bind falls as a burst outgrows it, whatever the scheduling costs."""
    spent: dict[str, float] = replica["threads_us_per_bind"]
    if EVENT_WRITER not in spent:  # a scheduler that does not name its threads (an older tree)
        return None
    return sum(us for kind, us in spent.items() if kind != EVENT_WRITER)


def costliest(phase: dict[str, Any]) -> dict[str, Any]:
    """The replica of a phase that spent the most CPU per bind."""
    return max(phase["replicas"].values(), key=lambda r: r["cpu_ms_per_bind"] or 0.0)


def subject(phase: dict[str, Any]) -> dict[str, Any]:
    """The replica a sharded phase is compared by: under ``--placement apart`` the one on a CPU of
    its own (the others share theirs with the dev cluster), else the costliest."""
    measured = phase.get("measured")
    return phase["replicas"][measured] if measured in phase["replicas"] else costliest(phase)


def only(phase: dict[str, Any]) -> dict[str, Any]:
    """The one replica of a single-leader phase."""
    return next(iter(phase["replicas"].values()))


def evenness(phase: dict[str, Any]) -> dict[str, Any]:
    binds = [r["binds"] for r in phase["replicas"].values()]
    share = sum(binds) / max(len(binds), 1)
    worst = max((abs(b - share) / share for b in binds), default=0.0) if share else 0.0
    return {"binds_per_replica": binds, "even_share": round(share, 1), "max_deviation": round(worst, 3), "target": 0.25}


def table(document: dict[str, Any]) -> str:
    lines = ["phase      | runs | binds | binds per replica          | cycles/bind | CPU ms/bind (per replica)      | violations",
             "-----------|-----:|------:|----------------------------|------------:|--------------------------------|-----------"]
    for r in document["phases"]:
        per = [v["binds"] for v in r["replicas"].values()]
        cpu = [v["cpu_ms_per_bind"] for v in r["replicas"].values() if v["cpu_ms_per_bind"] is not None]
        bad = {k: v for k, v in r["violations"].items() if v}
        lines.append(f"{r['phase']:<10} | {r['runs']:>4} | {r['binds']:>5} | {str(per)[:26]:<26} | {r['cycles_per_bind']:>11.3f} | "
                     f"{str([round(c, 2) for c in cpu])[:30]:<30} | {bad or 0}")
    lines.append("")
    for i, p in enumerate(document["comparison"]["pairs"]):
        lines.append(f"pair {i}: cycles sharded/single {p['cycles_ratio']} (target <= 1.05); CPU/bind worst replica/single "
                     f"{p['cpu_ratio_worst_replica']}, mean {p['cpu_ratio_mean_replica']}, all replicas {p['cpu_ratio_total']} (target <= 1.1)")
        lines.append(f"        'worst replica' here: {p['subject']}")
        if "cpu_ms_per_bind_alone" in p:
            lines.append(f"        its namespaces alone: {p['cpu_ms_per_bind_alone']} ms/bind; worst replica/alone "
                         f"{p['cpu_ratio_worst_replica_alone']} (the same work done as one of the replicas), alone/single "
                         f"{p['cpu_ratio_alone_single']} (a scheduler of those namespaces only)")
        beside = (f", worst replica/alone {p['cpu_ratio_worst_replica_alone_without_events']}, alone/single "
                  f"{p['cpu_ratio_alone_single_without_events']}" if "cpu_ms_per_bind_alone" in p else "")
        lines.append(f"        without the Event writer (its cost per bind follows the Event budget): worst replica/single "
                     f"{p['cpu_ratio_worst_replica_without_events']}{beside}")
        for who, spent in p["threads_us_per_bind"].items():
            top = ", ".join(f"{kind} {us:.0f}" for kind, us in list(spent.items())[:5] if us >= 1.0)
            lines.append(f"        per thread, us/bind, {who}: {top or '(no reading)'}")
    if "even" in document:
        e = document["even"]
        lines.append(f"even: binds per replica {e['binds_per_replica']}, max deviation {e['max_deviation'] * 100:.1f} % (target <= 25 %)")
    chaos = document.get("chaos")
    if chaos:
        rb = chaos["rebalance_s"]
        lines.append(f"chaos: {len(chaos['cycles_detail'])} cycles; rebalance max {rb['max']} s, p50 {rb['p50']} s over {rb['n']} namespaces "
                     f"({rb['never']} never), target {rb['target']} s; namespace open max {chaos['open_s']['max']} s, p50 {chaos['open_s']['p50']} s "
                     f"({chaos['open_s']['never']} never); takeover max {chaos['takeover_s']['max']} s; "
                     f"in flight at pause {len(chaos['in_flight_at_pause'])}; violations {chaos['violations']}")
    lines.append(f"load average: start {document['machine']['loadavg_at_start']}, end {document['loadavg_at_end']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2, help="single/sharded pairs, alternating (default 2)")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--cycles", type=int, default=10, help="kill -9 / SIGSTOP cycles in the chaos phase (default 10)")
    parser.add_argument("--trickle", type=float, default=8.0, help="Runs per second created during the chaos cycles (default 8)")
    parser.add_argument("--lease", default="5,3,1", help="lease duration, renew deadline, retry period in seconds (default 5,3,1)")
    parser.add_argument("--phases", default="pairs,even,chaos", help="comma-separated from pairs, alone, even, chaos")
    parser.add_argument("--timeout", type=float, default=180.0, help="longest wait for the Runs to finish, seconds")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    parser.add_argument("--namespace-flags", action="store_true",
                        help="give the sharded replicas the 40 namespaces with --namespace (a watch per namespace and "
                             "kind) instead of sharing every namespace the API server lists (three watches per replica)")
    parser.add_argument("--placement", choices=(*PLACEMENTS, "spread", "apart"), default="split",
                        help="split (default): every scheduler on one CPU, the dev cluster and this harness on the others; "
                             "spread: each replica a CPU of its own, as on a cluster's nodes (needs replicas + 1 CPUs, "
                             "else split); apart: in the i-th pair, replica i (mod --replicas) on a CPU of its own and the "
                             "others with the dev cluster, compared by that replica (two CPUs suffice; --repeat 4 measures "
                             "each of four); shared: every process anywhere (the figures before this option)")
    args = parser.parse_args(argv)
    args.placement = Placement.of(args.placement, schedulers=args.replicas)
    args.placement.enter()
    args.lease = tuple(float(x) for x in args.lease.split(","))
    wanted = set(args.phases.split(","))
    began = time.monotonic()
    document: dict[str, Any] = {"benchmark": "shards", "machine": machine(), "phases": []}
    with tempfile.TemporaryDirectory(prefix="kruntimes-shards-") as tmp_name:
        tmp = Path(tmp_name)
        singles: list[dict[str, Any]] = []
        sharded: list[dict[str, Any]] = []
        alone: list[dict[str, Any]] = []
        if "pairs" in wanted:
            mixed = namespaces(MIXED_PODS)
            for index in range(args.repeat):
                for label, replicas, bucket in (("single", 1, singles), ("sharded", args.replicas, sharded)):
                    print(f"# {label} ...", file=sys.stderr, flush=True)
                    bucket.append(clean_phase(label, mixed, replicas, args, tmp, measured=index % replicas))
                    document["phases"].append(bucket[-1])
                if "alone" in wanted:
                    worst = subject(sharded[-1])
                    print(f"# alone ({len(worst['namespaces'])} namespaces) ...", file=sys.stderr, flush=True)
                    alone.append(clean_phase("alone", {ns: mixed[ns] for ns in worst["namespaces"]}, 1, args, tmp))
                    document["phases"].append(alone[-1])
        document["comparison"] = compare(singles, sharded, alone)
        if "even" in wanted:
            print("# even ...", file=sys.stderr, flush=True)
            even = clean_phase("even", namespaces((EVEN_PODS,)), args.replicas, args, tmp)
            document["phases"].append(even)
            document["even"] = evenness(even)
        if "chaos" in wanted:
            print("# chaos ...", file=sys.stderr, flush=True)
            chaos = chaos_phase(args, tmp)
            document["phases"].append(chaos)
            document["chaos"] = chaos
    document["settings"] = {"lease": args.lease, "replicas": args.replicas, "cycles": args.cycles, "trickle": args.trickle,
                            "repeat": args.repeat, "workers": WORKERS, "namespaces": NAMESPACES,
                            "placement": args.placement.describe(), "namespace_flags": args.namespace_flags}
    document["wall_seconds"] = round(time.monotonic() - began, 1)
    document["loadavg_at_end"] = os.getloadavg()
    text = json.dumps(document, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    print(table(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
