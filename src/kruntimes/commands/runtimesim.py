"""`kruntimes runtime-sim`: simulated Runtime Pods (and a burst of Runs) on any cluster, to load-test the scheduler.

A thin shell over ``kruntimes.runtimesim.client.SimulatorClient``: check the flags (a bad one
exits 2 with a one-line reason), connect as kubectl would, refuse a namespace that does not
exist, start the simulator (and the Run load, ``runtimesim.load``), print a progress line every
``--progress-interval``, and on SIGINT/SIGTERM stop writing, optionally delete what it created
(``--cleanup``), print a summary and exit 0; a second signal exits 1 at once.
"""

from __future__ import annotations

import argparse
import logging
import re
import secrets
import signal
import sys
import threading
import time
from collections.abc import Mapping
from types import FrameType
from typing import Final, TextIO

from returns.result import Failure

from kruntimes.commands import shutdown
from kruntimes.kubeclient.kube import Kube, load_configuration
from kruntimes.pure.model.times import parse_duration
from kruntimes.runtimesim import decide
from kruntimes.runtimesim.client import MANAGER, USER_AGENT, ClientSettings, Progress, SimulatorClient, fleets
from kruntimes.runtimesim.load import RunLoad

log = logging.getLogger("kruntimes.runtimesim")

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

_EPILOG: Final = """\
what it does, in the namespace it is given and nowhere else:
  - keeps --replicas Runtime Pods of each --runtime (named RUNTIME-0, RUNTIME-1...; labelled
    runtime=RUNTIME and app.kubernetes.io/managed-by=kruntimes-runtime-sim, annotated
    kruntimes.io/capacity.RESOURCE), marks them Running and Ready, and refreshes their
    kruntimes.io/RuntimedReady heartbeat every --heartbeat-interval. The pods carry a scheduling
    gate, so on a real cluster no node ever runs them; they cost the API server and etcd only;
  - with --follow-runtimes, also plays the Runtime controller for every Runtime object;
  - executes every Run the scheduler binds to one of its pods: Running at once, Succeeded (or
    Failed, --fail-percent) after --run-duration, Cancelled when spec.cancelRequested is set;
  - with --create-runs, creates that many Runs (sim-BATCH-N) at --rate per second.
It never touches a pod it did not create. Every request waits for --qps; statuses are written
through the status subresource with resourceVersion preconditions (a conflict is retried from a
fresh read); failures back off. Ctrl-C (or SIGTERM) stops writing and exits 0; with --cleanup it
first deletes its pods and the Runs it created (a second Ctrl-C skips that and exits 1).

the progress line (stderr, every --progress-interval):
  12s pods 50/50 ready | runs pending 278 scheduled 4 running 93 succeeded 408 failed 0 |
  created 784/1000 | binds 42/s done 37/s | 92 req/s, 0 conflicts, 0 errors

examples:
  # 50 pods of runtime python, 2 Runs each, Runs last 1 s; 1,000 Runs at 200/s; stop when drained
  kruntimes runtime-sim -n load-test --runtime python --replicas 50 --capacity runs=2 \\
      --run-duration 1s --create-runs 1000 --rate 200 --until-done --cleanup
  # keep pods for the Runtime objects of a namespace, as its controller would (Ctrl-C stops)
  kruntimes runtime-sim -n dev --follow-runtimes

exit status: 0 stopped by a signal, or --until-done and every created Run finished; 1 the Runs did
not all finish within --timeout, or creating them was refused; 2 bad flags, no cluster
configuration, or no such namespace.
"""


def _duration(text: str) -> float:
    parsed = parse_duration(text)
    if parsed is None or parsed.total_seconds() < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 500ms, 1s, 1m30s)")
    return parsed.total_seconds()


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number, at least 0")
    return value


def _percent(text: str) -> int:
    value = _non_negative_int(text)
    if value > 100:
        raise argparse.ArgumentTypeError(f"{text!r} is more than 100")
    return value


def _capacity(text: str) -> dict[str, str]:
    """``runs=2,gpu=1``: resource names and quantities as the capacity annotations carry them."""
    capacity: dict[str, str] = {}
    for part in text.split(","):
        resource, sep, quantity = part.strip().partition("=")
        if not sep or not resource or not quantity or "/" in resource:
            raise argparse.ArgumentTypeError(f"{part!r} is not RESOURCE=QUANTITY (e.g. runs=2,gpu=1)")
        capacity[resource] = quantity
    return capacity


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("-n", "--namespace", required=True, help="the namespace to simulate in (required: no default, so a load never lands by accident)")
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")
    fleet = parser.add_argument_group("Runtime Pods")
    fleet.add_argument("--runtime", action="append", default=[], metavar="NAME", help="a runtime to keep pods of (repeat for several)")
    fleet.add_argument("--replicas", type=_non_negative_int, default=1, metavar="N", help="pods of each --runtime (default 1)")
    fleet.add_argument("--capacity", type=_capacity, default={"runs": "2"}, metavar="RES=QTY[,...]", help="each pod's capacity (default runs=2)")
    fleet.add_argument("--image", metavar="IMAGE", help="the runtime container's image (shown only: no node runs the pods)")
    fleet.add_argument("--follow-runtimes", action="store_true", help="also keep the pods of every Runtime object of the namespace")
    fleet.add_argument("--heartbeat-interval", type=_duration, default=5.0, metavar="DURATION", help="between heartbeats (default 5s; the scheduler's staleAfter is 15s)")
    runs = parser.add_argument_group("Runs")
    runs.add_argument("--run-duration", type=_duration, default=1.0, metavar="DURATION", help="from Running to Succeeded (default 1s)")
    runs.add_argument("--no-execute", action="store_true", help="leave bound Runs alone (only pods and heartbeats)")
    runs.add_argument("--fail-percent", type=_percent, default=0, metavar="P", help="share of Runs (0-100, by UID) that end Failed (default 0)")
    runs.add_argument("--create-runs", type=_non_negative_int, default=0, metavar="N", help="create N Runs, spread over the --runtime names (default 0)")
    runs.add_argument("--rate", type=_non_negative_float, default=0.0, metavar="R", help="Runs created per second (default 0: as fast as --qps allows)")
    runs.add_argument("--until-done", action="store_true", help="exit once every created Run has finished (Succeeded, Failed, Cancelled)")
    runs.add_argument("--timeout", type=_duration, default=None, metavar="DURATION", help="with --until-done: exit 1 if they have not after this long")
    pace = parser.add_argument_group("pace and output")
    pace.add_argument("--qps", type=_non_negative_float, default=50.0, metavar="Q", help="requests per second at most, all included (default 50; 0: no limit)")
    pace.add_argument("--burst", type=_positive_int, default=100, metavar="B", help="requests allowed at once above --qps (default 100)")
    pace.add_argument("--workers", type=_positive_int, default=4, metavar="N", help="threads that write, and threads that create Runs (default 4 each)")
    pace.add_argument("--progress-interval", type=_duration, default=1.0, metavar="DURATION", help="between progress lines (default 1s; 0: none)")
    pace.add_argument("--cleanup", action="store_true", help="on exit, delete the pods of its runtimes and the Runs it created")


def _usage_error(args: argparse.Namespace) -> str | None:
    if not args.runtime and not args.follow_runtimes:
        return "nothing to simulate: name a --runtime, or --follow-runtimes"
    if len(set(args.runtime)) != len(args.runtime):
        return "a --runtime is named twice"
    for name in args.runtime:
        if len(name) > 50 or not _DNS_LABEL.fullmatch(name):
            return f"--runtime {name!r} is not a DNS label of at most 50 characters (it prefixes pod names)"
    if args.create_runs and not args.runtime:
        return "--create-runs needs the Runs' runtime: name it with --runtime"
    if args.until_done and not args.create_runs:
        return "--until-done needs --create-runs"
    if args.timeout is not None and not args.until_done:
        return "--timeout needs --until-done"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _usage_error(args)
    if problem is not None:
        sys.stderr.write(f"kruntimes runtime-sim: {problem}\n")
        return EXIT_USAGE
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    loaded = load_configuration(args.kubeconfig, args.context)
    if isinstance(loaded, Failure):
        sys.stderr.write(f"kruntimes runtime-sim: {loaded.failure().message}\n")
        return EXIT_USAGE
    kube = Kube(loaded.unwrap().configuration, user_agent=USER_AGENT)
    try:
        return _simulate(args, kube, sys.stderr)
    finally:
        kube.close()


def _simulate(args: argparse.Namespace, kube: Kube, out: TextIO) -> int:
    namespace = str(args.namespace)
    answer = kube.get(f"/api/v1/namespaces/{namespace}")
    if isinstance(answer, Failure) and answer.failure().kind != "forbidden":  # not allowed to look: try anyway
        error = answer.failure()
        reason = "does not exist (create it first: kubectl create namespace " + namespace + ")" if error.kind == "not_found" else f"cannot be read: {error}"
        out.write(f"kruntimes runtime-sim: namespace {namespace} {reason}\n")
        return EXIT_USAGE
    settings = ClientSettings(
        namespace=namespace,
        fleets=fleets(namespace, args.runtime, args.replicas, args.capacity, args.image),
        follow_runtimes=args.follow_runtimes,
        heartbeat_interval=args.heartbeat_interval,
        runs=None if args.no_execute else decide.RunSettings(args.run_duration, args.fail_percent),
        qps=args.qps,
        burst=args.burst,
        workers=args.workers,
        manager=MANAGER,
    )
    client = SimulatorClient(kube, settings)
    load = RunLoad(client, args.create_runs, args.rate, args.runtime, secrets.token_hex(3), threads=args.workers) if args.create_runs else None
    stop = threading.Event()
    caught: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if caught:
            raise SystemExit(EXIT_FAILED)  # a second signal: no clean-up, no summary
        caught.append(signum)
        stop.set()

    previous = shutdown.install(on_signal)
    try:
        out.write(_banner(kube, settings, args, load))
        out.flush()
        started = time.monotonic()
        client.start()
        if load is not None:
            load.start()
        status = _watch(client, load, args, stop, started, out)
        if load is not None:
            load.stop()
        client.stop()
        if load is not None:
            load.join(10)
        if args.cleanup:
            pods, runs = client.delete_created(load.batch if load is not None else None)
            out.write(f"cleaned up: {pods} pods, {runs} Runs deleted\n")
        out.write(_summary(client, load, started))
        if caught:
            out.write(f"stopped by {signal.Signals(caught[0]).name}\n")
        return status
    finally:
        shutdown.restore(previous)


def _watch(client: SimulatorClient, load: RunLoad | None, args: argparse.Namespace, stop: threading.Event, started: float, out: TextIO) -> int:
    """Print progress until a signal, or until the load drained (or timed out)."""
    interval = args.progress_interval if args.progress_interval > 0 else 1.0
    tty = out.isatty()
    last = client.progress()
    last_at = time.monotonic()
    while not stop.wait(interval):
        now = time.monotonic()
        current = client.progress()
        if args.progress_interval > 0:
            line = _line(now - started, current, last, now - last_at, load)
            out.write(f"\r{line}\033[K" if tty else f"{line}\n")
            out.flush()
        last, last_at = current, now
        if load is not None and args.until_done:
            if load.refused is not None:
                return EXIT_FAILED
            if load.finished and current.batch_ended >= load.count:
                break
            if args.timeout is not None and now - started > args.timeout:
                newline = "\n" if tty else ""
                out.write(f"{newline}kruntimes runtime-sim: {current.batch_ended} of {load.count} Runs finished within {args.timeout:g}s\n")
                return EXIT_FAILED
    if tty and args.progress_interval > 0:
        out.write("\n")
    return EXIT_FAILED if load is not None and load.refused is not None else EXIT_OK


def _line(elapsed: float, now: Progress, before: Progress, seconds: float, load: RunLoad | None) -> str:
    phases = now.phases
    seconds = max(seconds, 1e-9)
    counts = " ".join(f"{phase.lower()} {phases.get(phase, 0)}" for phase in ("Pending", "Scheduled", "Running", "Succeeded", "Failed"))
    others = sum(n for phase, n in phases.items() if phase not in ("Pending", "Scheduled", "Running", "Succeeded", "Failed"))
    parts = [
        f"{elapsed:4.0f}s pods {now.pods_ready}/{now.pods_wanted} ready",
        f"runs {counts}" + (f" other {others}" if others else ""),
    ]
    if load is not None:
        parts.append(f"created {load.created}/{load.count}")
    parts.append(f"binds {(now.binds - before.binds) / seconds:.0f}/s done {(now.ends - before.ends) / seconds:.0f}/s")
    parts.append(f"{(now.requests - before.requests) / seconds:.0f} req/s, {now.conflicts} conflicts, {now.errors} errors")
    return " | ".join(parts)


def _quantile(values: list[float], q: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def _banner(kube: Kube, settings: ClientSettings, args: argparse.Namespace, load: RunLoad | None) -> str:
    capacity = ",".join(f"{k}={v}" for k, v in args.capacity.items())
    what = [f"{f.runtime} x{f.replicas} ({capacity})" for f in settings.fleets]
    if settings.follow_runtimes:
        what.append("the namespace's Runtime objects")
    runs = "left alone" if settings.runs is None else f"run {settings.runs.duration:g}s ({settings.runs.fail_percent}% fail)"
    lines = [
        f"runtime-sim: namespace {settings.namespace} on {kube.host}",
        f"  pods: {'; '.join(what)}; heartbeat every {settings.heartbeat_interval:g}s",
        f"  bound Runs: {runs}; at most {settings.qps:g} requests/s",
    ]
    if load is not None:
        rate = f"{load.rate:g}/s" if load.rate > 0 else "as fast as --qps allows"
        lines.append(f"  creating {load.count} Runs (sim-{load.batch}-N) at {rate}")
    lines.append("  Ctrl-C stops" + (" and deletes what it created" if args.cleanup else ""))
    return "\n".join(lines) + "\n"


def _summary(client: SimulatorClient, load: RunLoad | None, started: float) -> str:
    progress = client.progress()
    counters = client.counters
    writes: Mapping[str, int] = counters.run_writes
    lines = [
        f"simulated for {time.monotonic() - started:.1f}s: {counters.pods_created} pods created, {counters.heartbeats} pod status writes, "
        f"Run writes {dict(sorted(writes.items()))}, {counters.requests} requests ({1000 * counters.request_seconds / max(1, counters.requests):.0f} ms each on average), "
        f"{counters.conflicts} conflicts, {counters.errors} errors"
    ]
    timings = [f"{what} p50 {_quantile(values, 0.5):.2f}s p99 {_quantile(values, 0.99):.2f}s" for what, values in client.tally.latencies().items() if values]
    if timings:
        lines.append("as watched: " + "; ".join(timings))
    peak = max(client.tally.peaks().values(), default=0)
    over = client.overcommitted()
    lines.append(f"most Runs at once on one pod: {peak}; pods over their capacity: {', '.join(f'{n} ({p}/{c})' for n, (p, c) in sorted(over.items())) or 'none'}")
    if load is not None and load.first_at is not None and load.last_at is not None:
        creating = load.last_at - load.first_at
        lines.append(f"created {load.created} Runs in {creating:.1f}s ({load.created / max(creating, 1e-9):.0f}/s)")
        last_end = client.tally.batch_last_end
        if progress.batch_ended >= load.count and last_end is not None:
            drain = last_end - load.first_at
            lines.append(f"all {load.count} finished {drain:.1f}s after the first was created: {load.count / max(drain, 1e-9):.0f} Runs/s")
        else:
            lines.append(f"{progress.batch_ended} of {load.count} created Runs finished")
    return "\n".join(lines) + "\n"
