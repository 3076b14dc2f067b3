"""`kruntimes demo`: a local cluster, the real scheduler and a sample workload, end to end.

1. Start the project's local API server in this process, with a pool of
   Runtime Pods (runtime ``python``) whose simulator executes the Runs bound to
   them: Scheduled → Running → Succeeded after ``--run-duration`` seconds, so
   capacity drains and frees.
2. Start the scheduler as a subprocess — ``python -m kruntimes.cli scheduler``,
   exactly what a cluster runs — and wait for its ``/readyz``.
3. Create the workload: an affinity cohort (required affinity to its own
   label: the first member seeds the cohort by the bootstrap rule, the others
   join its pod), an anti-affinity pair, then plain Runs, more than the pool
   holds at once, so a backlog waits and drains as Runs finish (see
   :func:`workload` for the order).
4. Watch every Run (one watcher, sub-second receive times), show progress,
   and end with a summary: placements, the cohort and pair checks, schedule
   latency p50/p99, throughput, the scheduler's own counters, and the
   commands to explore further. ``--keep`` leaves cluster and scheduler up
   until Ctrl-C so those commands work.

Exit status: 0 every Run succeeded and the placements hold; 1 they did not,
or not before ``--timeout``; 2 bad flags or the scheduler did not start;
130 interrupted. Ctrl-C at any point stops the scheduler, then the cluster.

One module at about 830 lines: the demo's cluster, workload, progress display and summary make one
command whose parts are used nowhere else.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Final, Literal, TextIO

from returns.pipeline import is_successful

from kruntimes.commands._demo_watch import RunWatcher, Seen
from kruntimes.devcluster import DevCluster, SimulatorSettings
from kruntimes.kubeclient.kube import PODS, RUNS, JSONObject, Kube, load_configuration
from kruntimes.pure.model.objects import API_VERSION, SUCCEEDED, TOPOLOGY_KEY

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130

NAMESPACE: Final = "default"
RUNTIME: Final = "python"
SCHEDULER_COMMAND: Final = (sys.executable, "-m", "kruntimes.cli", "scheduler")
STARTUP_SECONDS: Final = 30.0
"""How long the scheduler may take to report ``/readyz`` (it imports the Kubernetes client)."""
STOP_SECONDS: Final = 10.0
"""How long the scheduler may take to stop after SIGTERM before it is killed."""

_EPILOG: Final = """\
  kruntimes demo                      # 6 pods × capacity 2, 40 Runs of 1.5 s each
  kruntimes demo --keep               # then explore with kubectl and kruntimes explain; Ctrl-C ends it
  kruntimes demo --pods 3 --runs 10 --run-duration 0.5 --quiet

Everything runs on 127.0.0.1 and in memory; nothing outside this process tree is touched.
"""

Group = Literal["cohort", "pair", "batch"]


@dataclass(frozen=True, slots=True)
class DemoOptions:
    pods: int = 6
    capacity: int = 2
    runs: int = 40
    workers: int = 4
    run_duration: float = 1.5
    timeout: float = 60.0
    keep: bool = False
    quiet: bool = False
    scheduler_command: tuple[str, ...] = SCHEDULER_COMMAND
    """The scheduler to start, before the demo's own flags (tests may point elsewhere)."""

    @property
    def cohort_size(self) -> int:
        """As many as one pod holds (at most 3): the whole cohort fits on the pod its first member seeds."""
        return min(3, self.capacity)

    def problems(self) -> tuple[str, ...]:
        found: list[str] = []
        if self.pods < 2:
            found.append("--pods must be at least 2 (the anti-affinity pair needs two pods)")
        if self.capacity < 2:
            found.append("--capacity must be at least 2 (the cohort shares one pod)")
        if self.runs < self.cohort_size + 3:
            found.append(f"--runs must be at least {self.cohort_size + 3} (cohort, pair and one plain Run)")
        if self.workers < 1:
            found.append("--workers must be at least 1")
        if not 0 < self.run_duration <= 600:
            found.append("--run-duration must be more than 0 and at most 600 seconds")
        if self.timeout <= 0:
            found.append("--timeout must be positive")
        return tuple(found)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    defaults = DemoOptions()
    parser.add_argument("--pods", type=int, default=defaults.pods, help=f"Runtime Pods (default {defaults.pods})")
    parser.add_argument(
        "--capacity", type=int, default=defaults.capacity, help=f"Runs per pod (default {defaults.capacity})"
    )
    parser.add_argument("--runs", type=int, default=defaults.runs, help=f"Runs to create (default {defaults.runs})")
    parser.add_argument(
        "--workers", type=int, default=defaults.workers, help=f"scheduler workers (default {defaults.workers})"
    )
    parser.add_argument(
        "--run-duration",
        type=float,
        default=defaults.run_duration,
        metavar="S",
        help=f"seconds each Run runs before it succeeds (default {defaults.run_duration:g})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=defaults.timeout,
        metavar="S",
        help=f"give up when the Runs have not all succeeded after this long (default {defaults.timeout:g})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the cluster and scheduler up until Ctrl-C")
    parser.add_argument("--quiet", action="store_true", help="no progress, only the summary")


# --- the workload (pure) ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DemoRun:
    name: str
    group: Group
    labels: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, object] | None = None

    def body(self) -> JSONObject:
        spec: JSONObject = {"runtime": RUNTIME, "mode": {"task": {}}}  # the Run CRD requires a mode
        if self.affinity is not None:
            spec["affinity"] = dict(self.affinity)
        return {
            "apiVersion": API_VERSION,
            "kind": "Run",
            "metadata": {"name": self.name, "namespace": NAMESPACE, "labels": dict(self.labels)},
            "spec": spec,
        }


COHORT_LABEL: Final = {"cohort": "lab"}
PAIR_LABEL: Final = {"app": "db"}
STRAY_LABEL: Final = {"cohort": "field"}


def _required(kind: str, labels: Mapping[str, str]) -> Mapping[str, object]:
    term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": TOPOLOGY_KEY}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


@dataclass(frozen=True, slots=True)
class Workload:
    steps: tuple[tuple[DemoRun, ...], ...]
    """Created in order; every Run of a step is scheduled before the next step is created."""

    @property
    def runs(self) -> tuple[DemoRun, ...]:
        return tuple(run for step in self.steps for run in step)

    def group(self, group: Group) -> tuple[DemoRun, ...]:
        return tuple(r for r in self.runs if r.group == group)


def workload(options: DemoOptions) -> Workload:
    """The cohort, the anti-affinity pair and ``runs − cohort − 2`` plain Runs, in three steps.

    1. the first cohort member: no Run matches its required term yet, and its own
       labels do, so it seeds the cohort (Inter-Run Affinity bootstrap);
    2. the other members — they require a pod hosting the cohort, so they join
       its pod (the cohort is no larger than a pod's capacity) — and both Runs of
       the anti-affinity pair at once: parallel workers may plan the two in the
       same instant, and the scheduler must still keep them apart;
    3. the plain Runs, more than the free slots, so a backlog waits and drains
       as Runs finish.

    A step is created once every Run of the previous one is scheduled, as a
    user starting a group would: plain Runs created in the same millisecond as
    the followers could otherwise take the seed pod's last slots first, and the
    followers would then (correctly) wait until the seed finished.
    """
    cohort = tuple(
        DemoRun(f"cohort-{i}", "cohort", COHORT_LABEL, _required("runAffinity", COHORT_LABEL))
        for i in range(1, options.cohort_size + 1)
    )
    pair = tuple(
        DemoRun(f"pair-{suffix}", "pair", PAIR_LABEL, _required("runAntiAffinity", PAIR_LABEL)) for suffix in "ab"
    )
    plain_count = options.runs - len(cohort) - len(pair)
    width = len(str(plain_count))
    plain = tuple(DemoRun(f"batch-{i:0{width}d}", "batch") for i in range(1, plain_count + 1))
    return Workload(steps=(cohort[:1], cohort[1:] + pair, plain))


STRAY: Final = DemoRun("stray", "batch", {"demo": "stray"}, _required("runAffinity", STRAY_LABEL))
"""Created at the end: requires a cohort nobody runs and cannot seed it, so it waits (try `explain` on it)."""


# --- the summary (pure) --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


@dataclass(frozen=True, slots=True)
class Summary:
    total: int
    succeeded: int
    placements: tuple[tuple[str, tuple[str, ...]], ...]
    """(pod, Runs placed on it in scheduling order), pods by name."""
    cohort_pods: tuple[str, ...]
    pair_pods: tuple[str, ...]
    latencies: tuple[tuple[str, float, bool], ...]
    """(Run, creation → Scheduled seconds, waited for capacity)."""
    span: float
    """First creation → last bind, seconds."""
    elapsed: float
    """First creation → last success, seconds."""

    @property
    def cohort_ok(self) -> bool:
        return len(self.cohort_pods) == 1

    @property
    def pair_ok(self) -> bool:
        return len(self.pair_pods) == 2 and self.pair_pods[0] != self.pair_pods[1]

    @property
    def ok(self) -> bool:
        return self.succeeded == self.total and self.cohort_ok and self.pair_ok

    @property
    def binds_per_second(self) -> float:
        return len(self.latencies) / self.span if self.span > 0 else 0.0


def summarize(work: Workload, seen: Mapping[str, Seen]) -> Summary:
    runs = work.runs
    observed = [(run, seen.get(run.name, Seen())) for run in runs]
    created = [s.created for _, s in observed if s.created is not None]
    scheduled = [(run, s) for run, s in observed if s.scheduled is not None and s.pod]
    by_pod: dict[str, list[tuple[float, str]]] = {}
    for run, s in scheduled:
        assert s.scheduled is not None
        by_pod.setdefault(s.pod, []).append((s.scheduled, run.name))
    placements = tuple((pod, tuple(name for _, name in sorted(items))) for pod, items in sorted(by_pod.items()))
    latencies = tuple(
        (run.name, s.scheduled - s.created, s.waited)
        for run, s in scheduled
        if s.scheduled is not None and s.created is not None
    )
    start = min(created) if created else 0.0
    last_bind = max((s.scheduled for _, s in scheduled if s.scheduled is not None), default=start)
    last_done = max((s.finished for _, s in observed if s.finished is not None), default=last_bind)
    return Summary(
        total=len(runs),
        succeeded=sum(1 for _, s in observed if s.phase == SUCCEEDED),
        placements=placements,
        cohort_pods=tuple(sorted({pod for r in work.group("cohort") if (pod := seen.get(r.name, Seen()).pod)})),
        pair_pods=tuple(seen.get(r.name, Seen()).pod for r in work.group("pair")),
        latencies=latencies,
        span=last_bind - start,
        elapsed=last_done - start,
    )


def _latency_line(label: str, values: Sequence[float]) -> str:
    if not values:
        return f"  {label:<24} -"
    return (
        f"  {label:<24} p50 {_duration(percentile(values, 50)):>9}   p99 {_duration(percentile(values, 99)):>9}"
        f"   max {_duration(max(values)):>9}"
    )


def render_summary(summary: Summary, work: Workload, options: DemoOptions) -> list[str]:
    mark = {True: "✓", False: "✗"}
    lines = ["", "placements (pod: Runs in the order they were bound):"]
    width = max((len(pod) for pod, _ in summary.placements), default=0)
    for pod, names in summary.placements:
        lines.append(f"  {pod:<{width}}  {' '.join(names)}")
    cohort = work.group("cohort")
    pair = work.group("pair")
    cohort_where = ", ".join(summary.cohort_pods) or "nowhere"
    lines.append(
        f"  {mark[summary.cohort_ok]} affinity cohort ({len(cohort)} Runs requiring cohort=lab, seeded by the first): "
        f"{'all on ' if summary.cohort_ok else 'spread over '}{cohort_where}"
    )
    pair_where = " and ".join(f"{r.name} on {pod or '?'}" for r, pod in zip(pair, summary.pair_pods))
    lines.append(f"  {mark[summary.pair_ok]} anti-affinity pair (app=db): {pair_where}")
    lines.append(
        f"  {mark[summary.succeeded == summary.total]} {summary.succeeded}/{summary.total} Runs succeeded "
        f"in {summary.elapsed:.1f} s"
    )
    all_latency = [lat for _, lat, _ in summary.latencies]
    free = [lat for _, lat, waited in summary.latencies if not waited]
    waited = [lat for _, lat, waited in summary.latencies if waited]
    lines += [
        "",
        "schedule latency (creation → Scheduled, as received by a watch):",
        _latency_line(f"all {len(all_latency)} Runs", all_latency),
        _latency_line(f"{len(free)} found a free slot", free),
        _latency_line(f"{len(waited)} waited for capacity", waited),
    ]
    slots = options.pods * options.capacity
    lines.append(
        f"throughput: {len(summary.latencies)} binds in {summary.span:.2f} s = {summary.binds_per_second:.1f} binds/s "
        f"(capacity-bound: {slots} slots, {options.run_duration:g} s per Run)"
    )
    return lines


def parse_counters(text: str, names: Sequence[str]) -> dict[str, float]:
    """``name{labels}`` → value for the samples of ``names`` in a Prometheus text exposition."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        if sample.split("{", 1)[0] in names:
            with suppress(ValueError):
                values[sample] = float(value)
    return values


def metrics_line(text: str) -> str:
    samples = parse_counters(
        text,
        (
            "kruntimes_scheduler_sync_total",
            "kruntimes_scheduler_no_pods_total",
            "kruntimes_scheduler_reservation_conflicts_total",
            "kruntimes_scheduler_pending_run_wakeups_total",
        ),
    )

    def total(prefix: str) -> int:
        return int(sum(v for k, v in samples.items() if k.startswith(prefix)))

    scheduled = total('kruntimes_scheduler_sync_total{result="scheduled"')
    return (
        f"scheduler metrics: {scheduled} scheduled, "
        f"{total('kruntimes_scheduler_no_pods_total')} no-pod waits, "
        f"{total('kruntimes_scheduler_pending_run_wakeups_total')} wakeups, "
        f"{total('kruntimes_scheduler_reservation_conflicts_total')} reservation conflicts"
    )


# --- effects -----------------------------------------------------------------------------------------------


class _Failed(Exception):
    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


_STARTED: Final = re.compile(r" scheduler started .*\bmetrics=(?P<metrics>http\S+) health=(?P<health>http\S+)")


def _started_urls(log: Path) -> tuple[str, str] | None:
    """The metrics and health URLs from the scheduler's "scheduler started" line, once it is written.

    The scheduler picks its own ports (``127.0.0.1:0``): a port found free here could be taken by
    another process before the scheduler binds it.
    """
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    found = _STARTED.search(text)
    return None if found is None else (found["metrics"], found["health"])


def _http_get(url: str, timeout: float = 1.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback only
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as problem:
        return problem.code, ""
    except (urllib.error.URLError, OSError):
        return 0, ""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


class _Progress:
    """One compact line rewritten in place on a terminal; plain lines (on change, ≤ 1/s) otherwise."""

    def __init__(self, out: TextIO, enabled: bool) -> None:
        self._out = out
        self._enabled = enabled
        try:
            self._tty = out.isatty()
        except (AttributeError, ValueError):
            self._tty = False
        self._last = ""
        self._last_at = 0.0
        self._open = False

    def step(self, text: str) -> None:
        if self._enabled:
            self._end_line()
            print(text, file=self._out, flush=True)

    def update(self, text: str, *, force: bool = False) -> None:
        if not self._enabled or (text == self._last and not force):
            return
        now = time.monotonic()
        if self._tty:
            self._out.write("\r\x1b[K" + text)
            self._out.flush()
            self._open = True
        elif force or now - self._last_at >= 1.0:
            print(text, file=self._out, flush=True)
            self._last_at = now
        else:
            return
        self._last = text

    def _end_line(self) -> None:
        if self._open:
            self._out.write("\n")
            self._out.flush()
            self._open = False

    def close(self) -> None:
        self._end_line()


def _progress_text(work: Workload, seen: Mapping[str, Seen], start: float) -> str:
    counts = {"Pending": 0, "Scheduled": 0, "Running": 0, "Succeeded": 0}
    created = 0
    binds = 0
    for run in work.runs:
        s = seen.get(run.name)
        if s is None or s.created is None:
            continue
        created += 1
        binds += s.scheduled is not None
        bucket = s.phase if s.phase in counts else "Pending"
        counts[bucket] += 1
    elapsed = time.monotonic() - start
    return (
        f"[{elapsed:5.1f}s] created {created}/{len(work.runs)}  pending {counts['Pending']}  "
        f"scheduled {counts['Scheduled']}  running {counts['Running']}  succeeded {counts['Succeeded']}  "
        f"binds {binds}"
    )


def _all_scheduled(watcher: RunWatcher, runs: Sequence[DemoRun]) -> Callable[[], bool]:
    def done() -> bool:
        seen = watcher.seen()
        return all(seen.get(r.name, Seen()).scheduled is not None for r in runs)

    return done


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the demo like Ctrl-C (same clean shutdown); only possible on the main thread."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _no_interrupts() -> Iterator[None]:
    """Hold off Ctrl-C while shutting down, so a second one cannot orphan the scheduler."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Demo:
    """One demo: owns the temp directory, the cluster, the scheduler process and the watcher."""

    def __init__(self, options: DemoOptions, out: TextIO) -> None:
        self.options = options
        self.out = out
        self.progress = _Progress(out, not options.quiet)
        self.work = workload(options)
        self.directory = Path(tempfile.mkdtemp(prefix="kruntimes-demo-"))
        self.scheduler_log = self.directory / "scheduler.log"
        self.cycle_log = self.directory / "cycles.jsonl"
        self.cluster: DevCluster | None = None
        self.kubeconfig: Path | None = None
        self.kube: Kube | None = None
        self.watcher: RunWatcher | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_url = ""
        self.holding = False
        """``--keep`` and everything done: Ctrl-C is the normal way to end."""

    # -- setup --

    def start_cluster(self) -> None:
        options = self.options
        self.progress.step(
            f"kruntimes demo: {options.pods} Runtime Pods × capacity {options.capacity}, {options.runs} Runs "
            f"of {options.run_duration:g} s, {options.workers} scheduler workers"
        )
        settings = SimulatorSettings(heartbeat_interval=1.0, execute_runs=options.run_duration)
        self.cluster = DevCluster.start(simulator=settings)
        self.kubeconfig = self.cluster.kubeconfig_path(self.directory)
        self.kube = Kube(load_configuration(str(self.kubeconfig)).unwrap().configuration, request_timeout=10)
        self.cluster.add_runtime(RUNTIME, replicas=options.pods, capacity={"runs": str(options.capacity)})
        self._wait(self._pods_ready, 15.0, f"{options.pods} Runtime Pods did not become Ready")
        self.progress.step(f"  local API server {self.cluster.url}: {options.pods} Runtime Pods ready")

    def _pods_ready(self) -> bool:
        assert self.kube is not None
        listed = self.kube.list(PODS.path(NAMESPACE), {"labelSelector": f"runtime={RUNTIME}"})
        if not is_successful(listed):
            return False
        ready = 0
        for pod in listed.unwrap()[0]:
            status = pod.get("status")
            if not isinstance(status, dict) or status.get("phase") != "Running":
                continue
            conditions = status.get("conditions")
            if isinstance(conditions, list) and any(
                isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
            ):
                ready += 1
        return ready >= self.options.pods

    def start_scheduler(self) -> None:
        assert self.kubeconfig is not None
        command = [
            *self.options.scheduler_command,
            "--kubeconfig",
            str(self.kubeconfig),
            "--namespace",
            NAMESPACE,
            "--workers",
            str(self.options.workers),
            "--metrics-bind-address",
            "127.0.0.1:0",
            "--health-probe-bind-address",
            "127.0.0.1:0",
            "--cycle-log",
            str(self.cycle_log),
            "--log-format",
            "text",
            # The demo's own throwaway cluster, where no other scheduler runs: nothing to elect against.
            "--leader-elect=false",
        ]
        with open(self.scheduler_log, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_SECONDS
        ready_url = ""
        while not ready_url or _http_get(ready_url, 0.5)[0] != 200:
            if not ready_url and (started := _started_urls(self.scheduler_log)) is not None:
                self.metrics_url, ready_url = f"{started[0]}/metrics", f"{started[1]}/readyz"
                continue
            if self.process.poll() is not None:
                raise _Failed(
                    f"the scheduler exited with status {self.process.returncode} before it was ready; "
                    f"its log ({self.scheduler_log}):\n{_tail(self.scheduler_log)}",
                    EXIT_USAGE,
                )
            if time.monotonic() > deadline:
                raise _Failed(
                    f"the scheduler was not ready after {STARTUP_SECONDS:g} s; its log ({self.scheduler_log}):\n"
                    f"{_tail(self.scheduler_log)}",
                    EXIT_USAGE,
                )
            time.sleep(0.05)
        self.progress.step(f"  scheduler pid {self.process.pid} ready (metrics {self.metrics_url})")

    def start_watcher(self) -> None:
        assert self.kube is not None
        self.watcher = RunWatcher(self.kube, NAMESPACE)
        if not self.watcher.start():
            raise _Failed(f"cannot watch Runs: {self.watcher.error or 'no answer'}")

    # -- the workload --

    def create(self, run: DemoRun) -> None:
        assert self.kube is not None and self.watcher is not None
        self.watcher.created(run.name)
        result = self.kube.create(RUNS.path(NAMESPACE), run.body())
        if not is_successful(result):
            raise _Failed(f"cannot create Run {run.name}: {result.failure()}")

    def run_workload(self) -> float:
        """Create everything, follow progress until every Run succeeded; returns the start instant."""
        assert self.watcher is not None
        watcher = self.watcher
        start = time.monotonic()
        deadline = start + self.options.timeout
        *first, last = self.work.steps
        for step in first:
            for run in step:
                self.create(run)
            names = ", ".join(r.name for r in step)
            self._wait(
                _all_scheduled(watcher, step),
                max(0.0, deadline - time.monotonic()),
                f"{names} not scheduled within --timeout {self.options.timeout:g} s",
                progress_from=start,
            )
        for run in last:
            self.create(run)
            self._check_scheduler()
        self._wait(
            lambda: all(watcher.seen().get(r.name, Seen()).phase == SUCCEEDED for r in self.work.runs),
            max(0.0, deadline - time.monotonic()),
            f"not every Run succeeded within --timeout {self.options.timeout:g} s",
            progress_from=start,
        )
        self.progress.update(_progress_text(self.work, watcher.seen(), start), force=True)
        self.progress.close()
        return start

    def _check_scheduler(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise _Failed(
                f"the scheduler exited with status {self.process.returncode}; its log ({self.scheduler_log}):\n"
                f"{_tail(self.scheduler_log)}"
            )

    def _wait(self, done: Callable[[], bool], seconds: float, failure: str, progress_from: float | None = None) -> None:
        deadline = time.monotonic() + seconds
        while not done():
            self._check_scheduler()
            if progress_from is not None and self.watcher is not None:
                self.progress.update(_progress_text(self.work, self.watcher.seen(), progress_from))
            if time.monotonic() > deadline:
                self.progress.close()
                raise _Failed(failure + self._stuck())
            time.sleep(0.05)

    def _stuck(self) -> str:
        if self.watcher is None:
            return ""
        seen = self.watcher.seen()
        stuck = [(r.name, seen.get(r.name, Seen())) for r in self.work.runs]
        stuck = [(name, s) for name, s in stuck if s.created is not None and s.phase != SUCCEEDED]
        if not stuck:
            return ""
        lines = [f"; {len(stuck)} not done:"]
        for name, s in stuck[:8]:
            where = f" on {s.pod}" if s.pod else ""
            lines.append(f"    {name}: {s.phase}{where} {s.message}".rstrip())
        lines.append(f"  ask why: kruntimes explain --kubeconfig {self.kubeconfig} {NAMESPACE}/{stuck[0][0]}")
        return "\n".join(lines)

    def stray(self) -> str:
        """Create the stray Run and return the wait message the scheduler writes for it (or "")."""
        assert self.watcher is not None
        watcher = self.watcher
        self.create(STRAY)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            message = watcher.seen().get(STRAY.name, Seen()).message
            if message:
                return message
            time.sleep(0.05)
        return ""

    # -- report --

    def report(self, stray_message: str) -> Summary:
        assert self.watcher is not None
        summary = summarize(self.work, self.watcher.seen())
        lines = render_summary(summary, self.work, self.options)
        status, text = _http_get(self.metrics_url)
        if status == 200:
            lines.append(metrics_line(text))
        if stray_message:
            lines += ["", f"a Run that waits on purpose: {NAMESPACE}/{STRAY.name} — {stray_message}"]
        lines += ["", self._explore()]
        print("\n".join(lines), file=self.out, flush=True)
        return summary

    def _explore(self) -> str:
        kc = self.kubeconfig
        some = self.work.group("cohort")[-1].name
        commands = [
            f"kubectl --kubeconfig {kc} get runs",
            f"kubectl --kubeconfig {kc} get events --field-selector involvedObject.name={STRAY.name}",
            f"kruntimes explain --kubeconfig {kc} {NAMESPACE}/{STRAY.name}",
            f"kruntimes explain --kubeconfig {kc} {NAMESPACE}/{some} --cycle-log {self.cycle_log}",
            f"curl -s {self.metrics_url} | grep ^kruntimes_",
        ]
        if self.options.keep:
            head = "explore (the cluster and the scheduler stay up until Ctrl-C):"
        else:
            head = "explore (run `kruntimes demo --keep` to keep the cluster and scheduler up for these):"
        return "\n".join([head] + [f"  {c}" for c in commands])

    def hold(self) -> None:
        """``--keep``: wait for Ctrl-C, watching that the scheduler stays up."""
        print("\ncluster and scheduler are up; press Ctrl-C to stop them.", file=self.out, flush=True)
        self.holding = True
        while True:
            self._check_scheduler()
            time.sleep(0.2)

    # -- teardown --

    def close(self) -> None:
        """Scheduler first (it may still be writing), then the watcher, the cluster, the temp directory."""
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.watcher is not None:
            self.watcher.stop()
        if self.kube is not None:
            self.kube.close()
        if self.cluster is not None:
            self.cluster.stop()
        if self.watcher is not None:
            self.watcher.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def run_demo(options: DemoOptions, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The demo; ``out`` (summary, progress) and ``err`` (problems) default to the current stdout/stderr."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    problems = options.problems()
    if problems:
        for problem in problems:
            print(f"kruntimes demo: {problem}", file=err)
        return EXIT_USAGE
    with _sigterm_as_interrupt():
        demo = _Demo(options, out)
        try:
            demo.start_cluster()
            demo.start_watcher()
            demo.start_scheduler()
            demo.run_workload()
            summary = demo.report(demo.stray())
            if not summary.ok:
                print("kruntimes demo: the placements do not hold (see ✗ above)", file=err)
                return EXIT_FAILED
            if options.keep:
                demo.hold()
            return EXIT_OK
        except _Failed as failure:
            demo.progress.close()
            print(f"kruntimes demo: {failure.message}", file=err)
            return failure.code
        except KeyboardInterrupt:
            demo.progress.close()
            print("kruntimes demo: stopping the scheduler and the cluster…", file=err)
            return EXIT_OK if demo.holding else EXIT_INTERRUPTED
        finally:
            with _no_interrupts():
                demo.close()


def run(args: argparse.Namespace) -> int:
    options = DemoOptions(
        pods=args.pods,
        capacity=args.capacity,
        runs=args.runs,
        workers=args.workers,
        run_duration=args.run_duration,
        timeout=args.timeout,
        keep=args.keep,
        quiet=args.quiet,
    )
    return run_demo(options)


__all__ = [
    "DemoOptions",
    "DemoRun",
    "Summary",
    "Workload",
    "configure",
    "metrics_line",
    "percentile",
    "render_summary",
    "run",
    "run_demo",
    "summarize",
    "workload",
]
