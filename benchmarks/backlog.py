"""Backlog: the scheduler started after thousands of Runs already wait, draining them through finite capacity.

    .venv/bin/python benchmarks/backlog.py                       # 1k (3 runs), 10k, 50k + mixed + fair (~27 min)
    .venv/bin/python benchmarks/backlog.py --quick               # 1k and 5k, mixed at 5k, fair at a quarter (~5 min)
    .venv/bin/python benchmarks/backlog.py --sizes 10000 --variants backlog
    .venv/bin/python benchmarks/backlog.py --sizes 1000x5,50000 --variants backlog   # flatness, 1k five times
    .venv/bin/python benchmarks/backlog.py --queue-order namespace-fair --variants fair
    .venv/bin/python benchmarks/backlog.py --create-rate 2000,10000,50000   # the dev cluster alone

Three processes per variant (no shared GIL, each one's CPU read from /proc): the dev
API server (``python -m kruntimes.devcluster --execute-runs 1s``: its simulator keeps the
Runtime Pods Running, Ready and heartbeating and takes every bound Run Scheduled ->
Running -> Succeeded after the run duration), the scheduler (``kruntimes scheduler
--workers 4``, all namespaces), and this load generator (creator threads and one watch
of every Run). The Runs are all created and seen by the watch *before* the scheduler
starts.

Placement (``--placement``, default ``split``): the scheduler runs on a CPU of its own, the dev
cluster and this harness on the others, as an API server and a scheduler do in a cluster;
``shared`` lets every process use every CPU, as the rounds before this option measured.

Variants:

* ``backlog`` at each size N: one namespace, 50 Runtime Pods x 2 slots, N Runs of 1 slot.
  The ideal drain is capacity-bound: N x run duration / 100 slots.
* ``mixed`` at the largest quick/--sizes size: three namespaces with 50 % / 30 % / 20 % of the
  Runs and 25 / 15 / 10 pods x 2 slots; in the first an affinity cohort (Runs that must
  share a pod with Runs of their cohort label), in the second Runs requesting 3 slots,
  which fit no pod and stay Pending (excluded from drain and order figures).
* ``fair``: four namespaces with 8k / 2k / 1k / 500 Runs (times ``--fair-scale``), each with
  its own runtime of 10 pods whose slots hold the whole namespace at once, so the
  scheduler, not capacity, is the bottleneck; what matters is each namespace's share of
  the binds while all four wait, and after how many binds the smallest one finished.

Figures (per variant): cycles per bind (``kruntimes_scheduler_sync_duration_seconds_count``
over binds), wakeups per bind (``kruntimes_scheduler_pending_run_wakeups_total`` over
binds), scheduler CPU per bind (utime+stime from /proc, from readiness to the last
completion), drain time (first bind -> last Run Succeeded) against the ideal,
startup (scheduler spawned -> first bind), order within each namespace (fraction of
bind-order pairs inverted against creation order, and the largest "positions late": how
many places after its creation rank a Run was bound; bind order is the resourceVersion of
the bind event; creation order is the queue policy's: ``creationTimestamp``, which has
whole-second resolution, then the name — and, as ``*_commit``, the resourceVersions of the
creates, an order no client can read back once several Runs share a second; and, as ``*_decided``,
bind order by the bind's ``Scheduled`` condition time, the instant the scheduler's cycle decided it:
with several workers binding at once the API server commits their writes in the order it gets to
them, which is not always the order they were sent), each namespace's share of the
binds until the first namespace ran out of bindable Runs, schedule latency (watch
receipt of the ADDED event -> of the bind event: it includes the pre-creation wait),
scheduler RSS per Pending Run (max RSS while the backlog is >= 90 % of its peak,
minus the RSS of a scheduler that ran against the same cluster with no Runs, over the
peak backlog), CPU per bind over each tenth of the drain's binds (``cpu_ms_per_bind_by_tenth``,
from 0.5 s samples; the summary line sets the second tenth, 80-90 % of the backlog left, against
the ninth, 10-20 % left: within one run, how the work per bind moves with the backlog), and per
kind of thread (``threads_per_bind``: the scheduler names its threads in the kernel) µs of CPU
and voluntary context switches per bind.

Flatness (``flatness`` in the JSON, and the last summary line): the median CPU per bind of each
size's runs, and the largest size's over the smallest's. A size written ``1000x5`` runs five
times. A 1k drain lasts 10 s and its CPU per bind spreads by about ±5 % from run to run (how
clustered its 1,000 binds come), more than a 500 s drain's, so by default the 1k size runs three
times; every run's figure is kept in ``results`` and listed on the line.

``--create-rate`` measures the dev cluster alone: Runs created as fast as it accepts with
its simulator executing Runs; the create rate over the 1,000 creates that end at each
given count, the server's CPU share meanwhile and its CPU milliseconds per create.

Prints one JSON object, then one summary line per variant. ``--plot FILE`` writes a PNG of
the backlog and binds/s over time. ``--profile DIR`` samples the scheduler with ``py-spy
record --gil`` (it must be on PATH or in the virtualenv) from readiness to the last
completion and writes each variant's collapsed stacks to ``DIR/<variant>.txt`` (sampling
slows the scheduler: its CPU figures are then not comparable).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kruntimes.pure.model.times import parse_time  # noqa: E402
from _servers import SERVER_HELP  # noqa: E402
from _common import (  # noqa: E402
    in_parallel,
    ALL_RUNS_PATH,
    JSON_HEADERS,
    RUNS_PATH,
    Http,
    ServerProcess,
    context_switches,
    cpu_seconds,
    cpu_split,
    page_faults,
    machine,
    percentile,
    scrape,
    Placement,
    PLACEMENTS,
    start_scheduler,
    status_kib,
    stop_process,
    thread_cpu,
    threads_per_bind,
    wait_http_ok,
    wait_pods_ready,
)

RUN_SECONDS: Final = 1.0
WORKERS: Final = 4
VARIANTS: Final = ("backlog", "mixed", "fair", "wide", "startup")
DEV_ONLY: Final = ("backlog", "mixed", "fair")
"""Variants run with the dev cluster's own simulator (``--execute-runs``); ``wide`` and ``startup``
run on any ``--server`` with the runtime simulator client (``_wide.py``)."""
FAIR_SIZES: Final = (8000, 2000, 1000, 500)


@dataclass(frozen=True)
class Namespace:
    name: str
    pods: int
    slots: int
    plain: int
    cohort: int = 0
    """Runs with required affinity to the Runs of their cohort label (one cohort)."""
    unfit: int = 0
    """Runs requesting more slots than any pod has."""

    @property
    def fit(self) -> int:
        return self.plain + self.cohort


@dataclass(frozen=True)
class Variant:
    name: str
    size: int
    namespaces: tuple[Namespace, ...]

    @property
    def label(self) -> str:
        return f"{self.name}@{self.size}"

    @property
    def ideal_seconds(self) -> float:
        """Capacity-bound: every namespace's bindable Runs through its slots, one run duration each."""
        return max(-(-ns.fit // (ns.pods * ns.slots)) * RUN_SECONDS for ns in self.namespaces)


def backlog_variant(size: int) -> Variant:
    return Variant("backlog", size, (Namespace("default", 50, 2, size),))


def mixed_variant(size: int) -> Variant:
    a, b = size * 5 // 10, size * 3 // 10
    c = size - a - b
    cohort = max(10, size // 200)
    unfit = max(5, size // 100)
    return Variant("mixed", size, (
        Namespace("mix-a", 25, 2, a - cohort, cohort=cohort),
        Namespace("mix-b", 15, 2, b - unfit, unfit=unfit),
        Namespace("mix-c", 10, 2, c),
    ))


def fair_variant(scale: float) -> Variant:
    sizes = [max(1, int(n * scale)) for n in FAIR_SIZES]
    names = ("fair-a", "fair-b", "fair-c", "fair-d")
    return Variant("fair", sum(sizes), tuple(Namespace(name, 10, -(-n // 10) + 1, n) for name, n in zip(names, sizes)))


# --- the load generator ----------------------------------------------------------------------------


def run_body(namespace: str, name: str, *, cohort: bool = False, slots: int = 1) -> bytes:
    labels = {"app": "backlog"} | ({"cohort": "c0"} if cohort else {})
    spec: dict[str, Any] = {"runtime": "python", "mode": {"task": {}}, "resources": {"requests": {"runs": str(slots)}}}
    if cohort:
        spec["affinity"] = {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kruntimes.io/runtime-pod", "labelSelector": {"matchLabels": {"cohort": "c0"}}}]}}
    body = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec}
    return json.dumps(body, separators=(",", ":")).encode()


def bodies_for(ns: Namespace) -> list[bytes]:
    """The namespace's Runs, the special ones spread evenly through the plain ones."""
    total = ns.plain + ns.cohort + ns.unfit
    order = ["plain"] * total
    for count, offset, kind in ((ns.cohort, 0, "cohort"), (ns.unfit, 1, "unfit")):
        for i in range(count):
            position = min(total - 1, i * total // count + offset)
            assert order[position] == "plain", "one kind of special Run per namespace"
            order[position] = kind
    return [run_body(ns.name, f"r-{i:06d}", cohort=k == "cohort", slots=3 if k == "unfit" else 1) for i, k in enumerate(order)]


def create(url: str, namespace: str, bodies: Sequence[bytes], creators: int, done: list[float] | None = None) -> None:
    """POST every body from ``creators`` threads as fast as the server accepts; completion times into ``done``."""
    path = url.rstrip("/") + RUNS_PATH.format(ns=namespace)
    errors: list[str] = []

    def creator(index: int) -> None:
        pool = urllib3.PoolManager(retries=False, maxsize=1, timeout=urllib3.Timeout(connect=10, read=120))
        for seq in range(index, len(bodies), creators):
            resp = pool.request("POST", path, body=bodies[seq], headers=JSON_HEADERS)
            if resp.status != 201:
                errors.append(f"{resp.status} {resp.data[:200]!r}")
            elif done is not None:
                done.append(time.perf_counter())

    in_parallel(creators, creator, errors)


@dataclass(eq=False)
class RunWatcher(threading.Thread):
    """One watch of every Run: per Run, the (resourceVersion, receipt time) of its ADDED and bind
    events, and the receipt time of its completion."""

    url: str
    resource_version: str
    added: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    bound: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    created: dict[tuple[str, str], str] = field(default_factory=dict)
    decided: dict[tuple[str, str], str] = field(default_factory=dict)
    """The bind's ``Scheduled`` condition ``lastTransitionTime``: when the scheduler's cycle decided it."""
    finished: dict[tuple[str, str], float] = field(default_factory=dict)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, daemon=True, name="run-watcher")
        self._stop_flag = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=10, read=None))
        query = f"?watch=1&resourceVersion={self.resource_version}&timeoutSeconds=7200&allowWatchBookmarks=false"
        try:
            resp = pool.request("GET", self.url.rstrip("/") + ALL_RUNS_PATH + query, headers=JSON_HEADERS, preload_content=False)
            self._response = resp
            self.ready.set()
            buffer = b""
            loads = json.loads
            added, bound, finished = self.added, self.bound, self.finished
            while not self._stop_flag.is_set():
                chunk = resp.read1(1 << 20)
                if not chunk:
                    return
                now = time.perf_counter()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line:
                        continue
                    event = loads(line)
                    obj = event["object"]
                    meta = obj["metadata"]
                    key = (meta["namespace"], meta["name"])
                    if key not in added:
                        added[key] = (int(meta["resourceVersion"]), now)
                        self.created[key] = meta.get("creationTimestamp", "")
                    status = obj.get("status") or {}
                    phase = status.get("phase")
                    if status.get("assignedPod") and phase not in (None, "", "Pending") and key not in bound:
                        bound[key] = (int(meta["resourceVersion"]), now)
                        for condition in status.get("conditions") or ():
                            if condition.get("type") == "Scheduled" and condition.get("status") == "True":
                                self.decided[key] = str(condition.get("lastTransitionTime") or "")
                    if phase in ("Succeeded", "Failed") and key not in finished:
                        finished[key] = now
        except BaseException as exc:
            if not self._stop_flag.is_set():
                self.error = exc
            self.ready.set()

    def stop(self) -> None:
        self._stop_flag.set()
        resp = self._response
        if resp is not None:
            try:
                if isinstance(resp, urllib3.HTTPResponse):
                    resp.shutdown()
                resp.close()
            except (OSError, RuntimeError, ValueError):
                pass


def wait_for(predicate: Any, timeout: float, what: str, watcher: RunWatcher) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if watcher.error is not None:
            raise RuntimeError(f"the watch failed: {watcher.error!r}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


# --- figures ---------------------------------------------------------------------------------------


def inversions(sequence: Sequence[int]) -> int:
    """Pairs i < j with sequence[i] > sequence[j] (a Fenwick tree over ranks 0..n-1)."""
    n = len(sequence)
    tree = [0] * (n + 1)
    count = 0
    for seen, value in enumerate(sequence):
        i, smaller_or_equal = value + 1, 0
        while i > 0:
            smaller_or_equal += tree[i]
            i -= i & -i
        count += seen - smaller_or_equal
        i = value + 1
        while i <= n:
            tree[i] += 1
            i += i & -i
    return count


def decided_at(stamp: str) -> float:
    """An RFC 3339 time (the scheduler writes microseconds) as seconds; unknown sorts last."""
    parsed = parse_time(stamp)
    return parsed.timestamp() if parsed is not None else float("inf")


def order_figures(watcher: RunWatcher, namespace: str) -> dict[str, Any]:
    """Bind order against the queue policy's order within ``namespace``: ``creationTimestamp``
    (whole seconds on a Kubernetes API server), then the name — the only creation order the
    API shows; also against the commit order of the creates (``_commit`` figures), which the
    scheduler cannot see when several Runs share a creation second."""
    keys = [k for k in watcher.bound if k[0] == namespace]
    by_bind = sorted(keys, key=lambda k: watcher.bound[k][0])
    by_decision = sorted(keys, key=lambda k: (decided_at(watcher.decided.get(k, "")), watcher.bound[k][0]))
    by_policy = sorted(keys, key=lambda k: (watcher.created.get(k, ""), k[1]))
    by_commit = sorted(keys, key=lambda k: watcher.added[k][0])
    pairs = len(keys) * (len(keys) - 1) // 2
    figures: dict[str, Any] = {}
    for suffix, by_creation, bound in (("", by_policy, by_bind), ("_commit", by_commit, by_bind), ("_decided", by_policy, by_decision)):
        rank = {k: i for i, k in enumerate(by_creation)}
        sequence = [rank[k] for k in bound]
        figures["inverted_pairs" + suffix] = round(inversions(sequence) / pairs, 4) if pairs else 0.0
        late = sorted(position - rank[k] for position, k in enumerate(bound))
        figures["max_positions_late" + suffix] = late[-1] if late else 0
        figures["p99_positions_late" + suffix] = late[int(0.99 * (len(late) - 1))] if late else 0
    return figures


def shares(watcher: RunWatcher, variant: Variant) -> dict[str, Any]:
    """Each namespace's share of the binds until the first namespace had no bindable Run left,
    and after how many binds (of all namespaces) each namespace's last bind came."""
    binds = sorted((rv, key[0]) for key, (rv, _) in watcher.bound.items())
    last: dict[str, int] = {}
    for position, (_, ns) in enumerate(binds, 1):
        last[ns] = position
    names = [ns.name for ns in variant.namespaces if ns.fit]
    if len(names) < 2 or any(n not in last for n in names):
        return {"while_all_backlogged": {}, "finished_after_binds": last}
    cut = min(last[n] for n in names)
    counted = {n: 0 for n in names}
    for _, ns in binds[:cut]:
        counted[ns] += 1
    return {"while_all_backlogged": {n: round(c / cut, 4) for n, c in counted.items()}, "binds_while_all_backlogged": cut,
            "finished_after_binds": {n: last[n] for n in names}}


IDLE_SECONDS: Final = 5.0
"""How long the empty-cluster scheduler's CPU is read for its idle cost."""


def idle_probe(server: ServerProcess, tmp: Path, extra: Sequence[str], placement: Placement) -> tuple[int, float]:
    """RSS (KiB) of a scheduler that started, synced and idled against the cluster before any Run
    exists, and its CPU milliseconds per second over the next :data:`IDLE_SECONDS` (the pods'
    heartbeats, its Lease, its safety net: what it costs to be there, binding nothing)."""
    proc, metrics = start_scheduler(server.kubeconfig, tmp, workers=WORKERS, namespace=None, name="scheduler-empty", extra=extra,
                                    placement=placement)
    try:
        if not wait_http_ok(metrics + "/readyz", 120):
            raise RuntimeError("the empty-cluster scheduler did not become ready")
        time.sleep(2.0)
        rss = status_kib(proc.pid, "VmRSS")
        before = cpu_seconds(proc.pid)
        time.sleep(IDLE_SECONDS)
        return rss, (cpu_seconds(proc.pid) - before) * 1000 / IDLE_SECONDS
    finally:
        stop_process(proc)


def by_tenth(samples: Sequence[tuple[float, int, int, int, float]], binds: int) -> list[float | None]:
    """The scheduler's CPU ms per bind over each tenth of the drain's binds, in one process: the
    second tenth binds with 80-90 % of the backlog still waiting, the ninth with 10-20 %. Their
    ratio is how the work per bind moves with the backlog, free of what differs between two runs
    (the machine's load, and how clustered the binds come: a 1k drain keeps the waves of its first
    100 binds, a 50k drain smooths them into a steady stream, which wakes the scheduler more
    often per bind). The first tenth holds the first burst that fills the pods, the last the
    tail in which they empty. ``None`` for a tenth the 0.5 s samples do not span."""
    out: list[float | None] = []
    for tenth in range(10):
        low, high = binds * tenth / 10, binds * (tenth + 1) / 10
        first = next((x for x in samples if x[2] >= low), None)
        last = next((x for x in samples if x[2] >= high), None)
        if first is None or last is None or last[2] <= first[2]:
            out.append(None)
            continue
        out.append(round((last[4] - first[4]) * 1000 / (last[2] - first[2]), 3))
    return out


def start_profiler(directory: Path, label: str, pid: int) -> subprocess.Popen[bytes]:
    """``py-spy record --gil`` of ``pid`` into ``directory/<label>.txt`` (collapsed stacks), until stopped."""
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise RuntimeError("--profile needs py-spy (pip install py-spy)")
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"{label}.txt"
    return subprocess.Popen([found, "record", "--gil", "--format", "raw", "--rate", "200", "-p", str(pid), "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=open(directory / f"{label}.py-spy.log", "wb"))


def stop_profiler(profiler: subprocess.Popen[bytes]) -> None:
    """End the recording; py-spy writes its output on SIGINT."""
    profiler.send_signal(signal.SIGINT)
    try:
        profiler.wait(30)
    except subprocess.TimeoutExpired:
        profiler.kill()
        profiler.wait(5)


def run_variant(variant: Variant, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    runtimes = [arg for ns in variant.namespaces for arg in ("--runtime", f"{ns.name}/python={ns.pods}x{ns.slots}")]
    server = ServerProcess.start(
        tmp, [*runtimes, "--execute-runs", f"{RUN_SECONDS:g}s", "--event-window", "1000000", "--auto-create-namespaces",
              "--heartbeat-interval", args.heartbeat_interval],
        name=f"server-{variant.label}",
    )
    extra = ["--queue-order", args.queue_order] if args.queue_order else []
    out: dict[str, Any] = {"variant": variant.name, "size": variant.size,
                           "namespaces": {ns.name: {"pods": ns.pods, "slots": ns.slots, "runs": ns.fit, "unfit": ns.unfit, "cohort": ns.cohort}
                                          for ns in variant.namespaces}}
    proc = None
    try:
        http = Http(server.url)
        for ns in variant.namespaces:
            wait_pods_ready(http, ns.name, ns.pods)
        rss_empty, idle_ms_per_s = idle_probe(server, tmp, extra, args.placement)
        watcher = RunWatcher(server.url, http.resource_version(ALL_RUNS_PATH))
        watcher.start()
        watcher.ready.wait(10)
        began = time.perf_counter()
        total = sum(ns.fit + ns.unfit for ns in variant.namespaces)
        for ns in variant.namespaces:
            create(server.url, ns.name, bodies_for(ns), args.creators)
        wait_for(lambda: len(watcher.added) >= total, 120, "the watch to see every Run", watcher)
        out["create_seconds"] = round(time.perf_counter() - began, 1)
        fit = sum(ns.fit for ns in variant.namespaces)
        spawned = time.perf_counter()
        proc, metrics_url = start_scheduler(server.kubeconfig, tmp, workers=WORKERS, namespace=None, name=f"scheduler-{variant.label}", extra=extra,
                                               placement=args.placement)
        samples: list[tuple[float, int, int, int, float]] = []  # (t since spawn, pending, binds so far, RSS KiB, CPU s)
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.5):
                try:
                    rss, cpu = status_kib(proc.pid, "VmRSS"), cpu_seconds(proc.pid)
                except (OSError, KeyError):
                    return
                bound = len(watcher.bound)
                samples.append((time.perf_counter() - spawned, total - bound, bound, rss, cpu))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        if not wait_http_ok(metrics_url + "/readyz", 300):
            raise RuntimeError("the scheduler did not become ready")
        cpu_ready, ready_at = cpu_seconds(proc.pid), time.perf_counter()
        sys_ready, switches_ready = cpu_split(proc.pid)[1], context_switches(proc.pid)
        faults_ready, threads_ready = page_faults(proc.pid), thread_cpu(proc.pid)
        server_ready = cpu_seconds(server.pid)
        profiler = start_profiler(args.profile, variant.label, proc.pid) if args.profile is not None else None
        timeout = args.timeout if args.timeout is not None else max(300.0, 10 * variant.ideal_seconds + 120)
        try:
            wait_for(lambda: len(watcher.finished) >= fit, timeout, f"{fit} Runs to finish", watcher)
            out["complete"] = True
        except TimeoutError:
            out["complete"] = False  # the figures below are then over the Runs bound so far
        cpu_done, done_at = cpu_seconds(proc.pid), time.perf_counter()
        sys_done, switches_done = cpu_split(proc.pid)[1], context_switches(proc.pid)
        faults_done, threads_done = page_faults(proc.pid), thread_cpu(proc.pid)
        server_done = cpu_seconds(server.pid)
        if profiler is not None:
            stop_profiler(profiler)
        stop.set()
        sampler.join()
        metrics = scrape(metrics_url)
        peak_rss = status_kib(proc.pid, "VmHWM")
        stop_process(proc)
        watcher.stop()

        binds = len(watcher.bound)
        cycles = sum(v for k, v in metrics.items() if k.startswith("kruntimes_scheduler_sync_duration_seconds_count"))
        wakeups = sum(v for k, v in metrics.items() if k.startswith("kruntimes_scheduler_pending_run_wakeups_total"))
        first_bind = min(t for _, t in watcher.bound.values())
        last_finish = max(watcher.finished.values())
        drain = last_finish - first_bind
        latencies = [(t - watcher.added[k][1]) * 1000 for k, (_, t) in watcher.bound.items()]
        peak_pending = max((p for _, p, _, _, _ in samples), default=total)
        backlogged = [rss for _, p, _, rss, _ in samples if p >= 0.9 * peak_pending]
        rss_backlog = max(backlogged, default=peak_rss)
        out.update({
            "binds": binds,
            "cycles_per_bind": round(cycles / max(binds, 1), 2),
            "wakeups_per_bind": round(wakeups / max(binds, 1), 1),
            "cpu_ms_per_bind": round((cpu_done - cpu_ready) * 1000 / max(binds, 1), 2),
            "cpu_seconds_total": round(cpu_done, 1),
            "cpu_system_share": round((sys_done - sys_ready) / max(cpu_done - cpu_ready, 1e-9), 3),
            "context_switches_per_bind": round((switches_done - switches_ready) / max(binds, 1), 1),
            "page_faults_per_bind": round((faults_done - faults_ready) / max(binds, 1), 2),
            "threads_per_bind": threads_per_bind(threads_ready, threads_done, binds),
            "server_cpu_ms_per_bind": round((server_done - server_ready) * 1000 / max(binds, 1), 2),
            "idle_cpu_ms_per_s": round(idle_ms_per_s, 1),
            "cpu_ms_per_bind_over_idle": round(((cpu_done - cpu_ready) * 1000 - idle_ms_per_s * (done_at - ready_at)) / max(binds, 1), 2),
            "startup_seconds": round(first_bind - spawned, 2),
            "drain_seconds": round(drain, 1),
            "ideal_seconds": round(variant.ideal_seconds, 1),
            "drain_over_ideal": round(drain / variant.ideal_seconds, 3),
            "latency_ms": {"p50": round(percentile(latencies, 0.5)), "p99": round(percentile(latencies, 0.99)), "max": round(max(latencies, default=0.0))},
            "order": {ns.name: order_figures(watcher, ns.name) for ns in variant.namespaces},
            "shares": shares(watcher, variant),
            "unfit_still_pending": sum(ns.unfit for ns in variant.namespaces) - (binds - fit),
            "rss_kib": {"empty": rss_empty, "backlogged": rss_backlog, "peak": peak_rss},
            "rss_bytes_per_pending_run": round((rss_backlog - rss_empty) * 1024 / max(peak_pending, 1)),
            "metrics": {k.replace("kruntimes_scheduler_", ""): v for k, v in metrics.items()
                        if k.startswith(("kruntimes_scheduler_sync_total", "kruntimes_scheduler_pending_run_wakeups_total",
                                         "kruntimes_scheduler_reservation_conflicts_total", "kruntimes_scheduler_cycle_outcomes_total"))},
            "cpu_ms_per_bind_by_tenth": by_tenth(samples, binds),
            "samples": [(round(t, 1), p, b) for t, p, b, _, _ in samples],
        })
        return out
    finally:
        if proc is not None:
            stop_process(proc)
        server.stop()


# --- the dev cluster alone -------------------------------------------------------------------------


def create_rate(counts: Sequence[int], args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    server = ServerProcess.start(tmp, ["--runtime", "default/python=50x2", "--execute-runs", f"{RUN_SECONDS:g}s", "--event-window", "1000000",
                                       "--heartbeat-interval", args.heartbeat_interval], name="server-create-rate")
    try:
        http = Http(server.url)
        wait_pods_ready(http, "default", 50)
        done: list[float] = []
        cpu: dict[int, float] = {}
        window = 1000
        marks = sorted(set(counts) | {max(0, c - window) for c in counts})
        bodies = [run_body("default", f"r-{i:06d}") for i in range(max(counts))]
        clock: dict[int, float] = {}
        previous = 0
        for mark in marks:
            create(server.url, "default", bodies[previous:mark], args.creators, done)
            previous = mark
            clock[mark], cpu[mark] = time.perf_counter(), cpu_seconds(server.pid)
        out: dict[str, Any] = {}
        for c in counts:
            lo = max(0, c - window)
            seconds = clock[c] - clock.get(lo, clock[c])
            out[str(c)] = {"creates_per_second": round((c - lo) / seconds, 1) if seconds > 0 else 0.0,
                           "server_cpu_share": round((cpu[c] - cpu.get(lo, cpu[c])) / seconds, 2) if seconds > 0 else 0.0,
                           # what the server spends per create, which other load on the machine does not change
                           "server_cpu_ms_per_create": round((cpu[c] - cpu.get(lo, cpu[c])) * 1000 / max(c - lo, 1), 3)}
        return out
    finally:
        server.stop()


# --- output --------------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``1000x3,50000`` -> [(1000, 3), (50000, 1)]: each backlog size and how many times it runs."""
    out: list[tuple[int, int]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        size, _, times = part.partition("x")
        times = times or "1"
        if not (size.isdigit() and times.isdigit() and int(size) >= 1 and int(times) >= 1):
            raise ValueError(f"{part!r} is not a size (e.g. 1000) or a size and a count (e.g. 1000x3)")
        out.append((int(size), int(times)))
    return out


def flatness(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``backlog`` variant's CPU per bind by size, every run and the median, and the largest
    size's median over the smallest's (the issue's "50k vs 1k")."""
    runs: dict[int, list[float]] = {}
    for r in results:
        if r["variant"] == "backlog" and r["complete"]:
            runs.setdefault(r["size"], []).append(r["cpu_ms_per_bind"])
    medians = {size: round(statistics.median(values), 3) for size, values in sorted(runs.items())}
    out: dict[str, Any] = {"cpu_ms_per_bind": {str(size): values for size, values in sorted(runs.items())},
                           "cpu_ms_per_bind_median": {str(size): m for size, m in medians.items()}}
    if len(medians) > 1:
        smallest, largest = min(medians), max(medians)
        out["largest_over_smallest"] = round(medians[largest] / medians[smallest], 3) if medians[smallest] else None
    return out


def flatness_line(f: dict[str, Any]) -> str:
    sizes = ", ".join(f"{size}: {median:.2f} ({' '.join(f'{v:.2f}' for v in f['cpu_ms_per_bind'][size])})"
                      for size, median in f["cpu_ms_per_bind_median"].items())
    ratio = f.get("largest_over_smallest")
    return f"flatness: CPU ms/bind, median (each run) {sizes}" + (f"; largest over smallest {ratio:.2f}x" if ratio else "")


def summary_line(r: dict[str, Any]) -> str:
    order = "; ".join(f"{ns} inv {o['inverted_pairs'] * 100:.0f}% late max {o['max_positions_late']} p99 {o['p99_positions_late']} (by decision: max {o['max_positions_late_decided']} p99 {o['p99_positions_late_decided']}; vs commit order: max {o['max_positions_late_commit']})" for ns, o in r["order"].items())
    share = r["shares"].get("while_all_backlogged") or {}
    share_text = (" shares " + "/".join(f"{v * 100:.0f}%" for v in share.values())) if share else ""
    tenths = r.get("cpu_ms_per_bind_by_tenth") or [None] * 10
    second, ninth = tenths[1], tenths[8]
    tenths_text = (f" (backlog 80-90 % / 10-20 % left: {second:.2f}/{ninth:.2f} ms, {second / ninth:.2f}x)"
                   if second is not None and ninth else "")
    return (
        f"{r['variant']:>8} @ {r['size']:>6}{'' if r['complete'] else ' (INCOMPLETE)'}: {r['cycles_per_bind']:.1f} cycles/bind, {r['wakeups_per_bind']:.0f} wakeups/bind, "
        f"{r['cpu_ms_per_bind']:.2f} ms CPU/bind ({r['cpu_system_share'] * 100:.0f} % system, {r['context_switches_per_bind']:.0f} switches, {r['page_faults_per_bind']:.1f} page faults){tenths_text}, drain {r['drain_seconds']:.0f}s = {r['drain_over_ideal']:.2f}x ideal, "
        f"latency p50/p99/max {r['latency_ms']['p50'] / 1000:.1f}/{r['latency_ms']['p99'] / 1000:.1f}/{r['latency_ms']['max'] / 1000:.1f}s, "
        f"{r['rss_bytes_per_pending_run']} B RSS/pending Run; {order};{share_text}"
    )


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 2.6 * len(results)), squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        samples = r["samples"]
        ts = [t for t, _, _ in samples]
        ax.plot(ts, [p for _, p, _ in samples], "-", color="tab:blue", label="backlog (Runs not bound)")
        ax.set_ylabel("backlog", color="tab:blue")
        ax.set_ylim(bottom=0)
        rate = [0.0] + [(b1 - b0) / (t1 - t0) if t1 > t0 else 0.0 for (t0, _, b0), (t1, _, b1) in zip(samples, samples[1:])]
        twin = ax.twinx()
        twin.plot(ts, rate, "-", color="tab:orange", linewidth=0.8, label="binds/s")
        twin.set_ylabel("binds/s", color="tab:orange")
        twin.set_ylim(bottom=0)
        ax.set_title(f"{r['variant']} @ {r['size']}: drain {r['drain_over_ideal']:.2f}x ideal, {r['cycles_per_bind']:.1f} cycles/bind", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the scheduler started")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main_any_server(args: argparse.Namespace, names: list[str]) -> int:
    """``wide`` and ``startup`` on ``--server``, with its floor (``_wide.py``)."""
    from _servers import start_server, write_report
    from _wide import parse_trees, run_any_server, startup_line, wide_line

    wrong = [v for v in names if v not in ("wide", "startup")]
    if wrong:
        raise SystemExit(f"--variants {','.join(wrong)}: only wide and startup run with --server (the others need the dev cluster's simulator)")
    args.wide_sizes = [int(s) for s in str(args.wide_sizes).split(",") if s]
    trees = parse_trees(args.scheduler_src)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kruntimes-backlog-") as tmp:
        server = start_server(args.server, Path(tmp), scheduler_kubeconfig=args.scheduler_kubeconfig)
        try:
            out = run_any_server(server, names, trees, args, Path(tmp))
        finally:
            server.stop()
    write_report("backlog", args, began, machine(), out)
    floor = out["floor"]
    print(f"floor on {out['server']['version']}: {floor['patches_per_second']:.0f} status patches/s "
          f"(before {floor['a']['patches_per_second']:.0f}, after {floor['b']['patches_per_second']:.0f}; "
          f"steps {', '.join(str(s['clients']) + ': ' + format(s['patches_per_second'], '.0f') for s in floor['a']['steps'])}); "
          f"load average {out['loadavg_before'][0]:.1f} -> {out['loadavg_after'][0]:.1f}")
    for r in out["results"]:
        print(wide_line(r) if r["variant"] == "wide" else startup_line(r))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="sizes 1000,5000; fair at a quarter of its size")
    parser.add_argument("--sizes", help="backlog sizes, comma-separated, each with an optional run count: 1000x3 "
                                         "runs 1k three times (default 1000x3,10000,50000); mixed runs at the largest")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)} (default all)")
    parser.add_argument("--fair-scale", type=float, help="multiply the fair variant's 8k/2k/1k/500 Runs (default 1; 0.25 with --quick)")
    parser.add_argument("--queue-order", help="passed to `kruntimes scheduler --queue-order` (only when given)")
    parser.add_argument("--creators", type=int, default=4, help="creator threads (default 4)")
    parser.add_argument("--heartbeat-interval", default="5s", help="the simulator's pod heartbeat (default 5s)")
    parser.add_argument("--create-rate", metavar="COUNTS", help="measure only the dev cluster's create rate at these Run counts (e.g. 2000,10000,50000)")
    parser.add_argument("--timeout", type=float, help="longest drain, seconds (default 10 x the ideal + 120 s, at least 300 s); figures are then partial")
    parser.add_argument("--plot", type=Path, help="write a PNG of backlog and binds/s over time here")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the scheduler from readiness to the last completion; collapsed stacks in DIR/<variant>.txt")
    parser.add_argument("--json-out", type=Path, help="also write the JSON result here")
    parser.add_argument("--server", default="dev", help=f"wide and startup only: {SERVER_HELP}")
    parser.add_argument("--scheduler-kubeconfig", type=Path, help="with --server PATH: the scheduler's credentials (default the same)")
    parser.add_argument("--scheduler-src", action="append", metavar="LABEL=DIR",
                        help="wide and startup: also run the scheduler of another tree (PYTHONPATH=DIR), alternating; repeatable")
    parser.add_argument("--repeat", type=int, default=1, help="wide and startup: runs per tree (default 1)")
    parser.add_argument("--wide-sizes", default="5000", help="wide: backlog sizes (default 5000)")
    parser.add_argument("--wide-pods", type=int, default=50, help="wide and startup: Runtime Pods (default 50)")
    parser.add_argument("--wide-slots", type=int, default=100, help="wide and startup: slots per pod (default 100)")
    parser.add_argument("--startup-size", type=int, default=50_000, help="startup: Pending Runs (default 50000)")
    parser.add_argument("--startup-binds", type=int, default=100, help="startup: binds counted before the scheduler stops (default 100)")
    parser.add_argument("--floor-seconds", type=float, default=8.0, help="seconds per floor step (default 8)")
    parser.add_argument("--placement", choices=PLACEMENTS, default="split",
                        help="split (default): the scheduler on a CPU of its own, the dev cluster and this harness on the "
                             "others, as in a cluster; shared: every process anywhere (earlier rounds' figures)")
    args = parser.parse_args(argv)
    any_server = [v for v in (args.variants.split(",") if args.variants != ",".join(VARIANTS) else ["wide"] if args.server != "dev" else DEV_ONLY)
                  if v]
    if args.server != "dev" or any(v in ("wide", "startup") for v in any_server):
        return main_any_server(args, any_server)
    if args.variants == ",".join(VARIANTS):
        args.variants = ",".join(DEV_ONLY)
    args.placement = Placement.of(args.placement)
    try:
        sized = parse_sizes(args.sizes or ("1000,5000" if args.quick else "1000x3,10000,50000"))
    except ValueError as error:
        parser.error(f"--sizes: {error}")
    if not sized:
        parser.error("--sizes: give at least one size")
    sizes = [size for size, _ in sized]
    scale = args.fair_scale if args.fair_scale is not None else (0.25 if args.quick else 1.0)
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kruntimes-backlog-") as tmp:
        if args.create_rate:
            counts = [int(c) for c in args.create_rate.split(",") if c]
            document: dict[str, Any] = {"benchmark": "backlog-create-rate", "machine": machine(), "create_rate": create_rate(counts, args, Path(tmp))}
            document["wall_seconds"] = round(time.monotonic() - began, 1)
            print(json.dumps(document, indent=1))
            return 0
        args.placement.enter()  # (not for --create-rate: the dev cluster alone, on every CPU as before)
        variants = [backlog_variant(s) for s, times in sized for _ in range(times)] if "backlog" in names else []
        if "mixed" in names:
            variants.append(mixed_variant(max(sizes)))
        if "fair" in names:
            variants.append(fair_variant(scale))
        results: list[dict[str, Any]] = []
        for variant in variants:
            print(f"# {variant.label} ...", file=sys.stderr, flush=True)
            results.append(run_variant(variant, args, Path(tmp)))
            print("# " + summary_line(results[-1]), file=sys.stderr, flush=True)
    document = {
        "benchmark": "backlog",
        "machine": machine(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        | {"run_seconds": RUN_SECONDS, "workers": WORKERS, "placement": args.placement.describe()},
        "wall_seconds": round(time.monotonic() - began, 1),
        "results": results,
        "flatness": flatness(results),
    }
    text = json.dumps(document, indent=1)
    print(text)
    if args.json_out is not None:
        args.json_out.write_text(text)
    if args.plot is not None:
        plot(results, args.plot)
    for r in results:
        print(summary_line(r))
    if document["flatness"]["cpu_ms_per_bind"]:
        print(flatness_line(document["flatness"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
