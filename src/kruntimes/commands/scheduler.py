"""`kruntimes scheduler`: run the controller against a cluster until SIGTERM/SIGINT.

A thin shell: parse and check the flags (a bad flag exits 2 with a one-line
reason, never a traceback), set up logging, connect, then hand everything to
``effects.runner.Scheduler``. On SIGTERM or SIGINT it stops taking keys,
finishes the binds in flight, releases the lease and exits 0; a second signal
exits at once.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Final, TypeVar

from returns.pipeline import is_successful

from kruntimes.pure.queueing import FIFO, POLICIES
from kruntimes.commands import shutdown
from kruntimes.effects.cyclelog_writer import DEFAULT_BACKUPS, DEFAULT_MAX_BYTES
from kruntimes.effects.kube import connect
from kruntimes.effects.leader import DEFAULT_LEASE_NAME, default_identity
from kruntimes.effects.logs import LOG_FORMATS, LOG_LEVELS, LogFormat
from kruntimes.effects.logs import configure as configure_logging
from kruntimes.effects.runner import LeaderElectionOptions, Scheduler, SchedulerOptions, parse_bind_address
from kruntimes.pure.model.objects import DEFAULT_CONFIG
from kruntimes.pure.model.times import parse_duration

log = logging.getLogger("kruntimes.scheduler")

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
USER_AGENT_PREFIX: Final = "kruntimes-scheduler"

_DESCRIPTION: Final = """\
Schedule Pending Runs onto warm Runtime Pods: watch Runs, Runtime Pods and
PersistentWorkspaces, plan each Run with the deterministic core (the same one
`kruntimes simulate` runs), reserve capacity atomically and write the Run's
status. Run several replicas with --leader-elect: one leads, the rest wait warm.
"""

_EPILOG: Final = """\
examples:
  # against the local dev cluster, text logs, metrics on a free port
  kruntimes dev-cluster --kubeconfig-out /tmp/dev.kubeconfig &
  kruntimes scheduler --kubeconfig /tmp/dev.kubeconfig --metrics-bind-address 127.0.0.1:0

  # in a cluster (as deploy/ runs it): two replicas, one leads
  kruntimes scheduler --leader-elect --metrics-bind-address :8080 --health-probe-bind-address :8081

  # keep every decision for offline replay (/tmp: the shipped Deployment's writable emptyDir)
  kruntimes scheduler --cycle-log /tmp/kruntimes/cycles.jsonl
  kruntimes replay /tmp/kruntimes/cycles.jsonl

Durations are Go style (500ms, 15s, 1m30s). SIGTERM/SIGINT: finish in-flight binds,
release the lease, exit 0. Exit 2: bad flags or cluster configuration.
"""


_Number = TypeVar("_Number", int, float)


def _duration(text: str) -> timedelta:
    parsed = parse_duration(text)
    if parsed is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 500ms, 15s, 1m30s)")
    if parsed <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return parsed


def _stale_after(text: str) -> timedelta:
    """``--heartbeat-stale-after``: 0 means the default (15 s), as in SchedulerConfig and SPEC §1."""
    parsed = parse_duration(text)
    if parsed is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 500ms, 15s, 1m30s)")
    if parsed < timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative (0 means the default, 15s)")
    # The default itself rather than 0: the options keep one meaning for every value.
    return parsed if parsed > timedelta(0) else DEFAULT_CONFIG.heartbeat_stale_after


def _at_least(convert: Callable[[str], _Number], minimum: _Number, what: str) -> Callable[[str], _Number]:
    """An argparse ``type``: ``convert(text)``, refused unless it is ``>= minimum`` (NaN never is)."""

    def parse(text: str) -> _Number:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not value >= minimum:
            bound = "must not be negative" if minimum == 0 else f"must be at least {minimum}"
            raise argparse.ArgumentTypeError(f"{text!r} {bound}")
        return value

    return parse


_positive_int = _at_least(int, 1, "a whole number")
_non_negative_int = _at_least(int, 0, "a whole number")
_non_negative_float = _at_least(float, 0.0, "a number")


def _bind_address(text: str) -> str:
    try:
        parse_bind_address(text)
    except ValueError as problem:
        raise argparse.ArgumentTypeError(str(problem)) from None
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = _DESCRIPTION
    parser.epilog = _EPILOG

    cluster = parser.add_argument_group("cluster connection")
    cluster.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    cluster.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    cluster.add_argument(
        "--namespace",
        metavar="NS",
        action="append",
        dest="namespaces",
        default=[],
        help="schedule Runs of this namespace only; repeat for several (default: all namespaces)",
    )

    scheduling = parser.add_argument_group("scheduling")
    scheduling.add_argument(
        "--workers", type=_positive_int, default=4, metavar="N", help="Runs planned and bound in parallel (default: 4)"
    )
    scheduling.add_argument(
        "--queue-order",
        choices=sorted(POLICIES),
        default=FIFO.name,
        help="the order waiting Runs are served in: fifo (oldest first, across namespaces; the default) or "
        "namespace-fair (namespaces with waiting Runs take turns, oldest first within each, so a small "
        "tenant is not starved by a big one)",
    )
    scheduling.add_argument(
        "--heartbeat-stale-after",
        type=_stale_after,
        default=DEFAULT_CONFIG.heartbeat_stale_after,
        metavar="DURATION",
        help="a Runtime Pod whose runtimed heartbeat is older is unavailable (default: 15s; 0 means the default)",
    )

    election = parser.add_argument_group("leader election (run several replicas; one schedules)")
    election.add_argument("--leader-elect", action="store_true", help="elect a leader on a coordination.k8s.io Lease")
    election.add_argument(
        "--leader-elect-lease-name", default=DEFAULT_LEASE_NAME, metavar="NAME", help=f"(default: {DEFAULT_LEASE_NAME})"
    )
    election.add_argument(
        "--leader-elect-namespace",
        metavar="NS",
        help="namespace of the Lease (default: the pod's own namespace in a cluster, else default)",
    )
    election.add_argument(
        "--leader-elect-lease-duration",
        type=_duration,
        default=timedelta(seconds=15),
        metavar="DURATION",
        help="a standby takes over this long after the leader's last renewal (default: 15s)",
    )
    election.add_argument(
        "--leader-elect-renew-deadline",
        type=_duration,
        default=timedelta(seconds=10),
        metavar="DURATION",
        help="the leader steps down when it could not renew for this long (default: 10s)",
    )
    election.add_argument(
        "--leader-elect-retry-period",
        type=_duration,
        default=timedelta(seconds=2),
        metavar="DURATION",
        help="between attempts to acquire or renew (default: 2s)",
    )
    election.add_argument(
        "--leader-elect-identity",
        metavar="ID",
        help="this replica's holder identity (default: <hostname>_<random>); also in the User-Agent",
    )

    observability = parser.add_argument_group("metrics, probes and logs")
    observability.add_argument(
        "--metrics-bind-address",
        type=_bind_address,
        default=":8080",
        metavar="ADDR",
        help="host:port for /metrics; port 0 picks a free port; 0 disables (default: :8080)",
    )
    observability.add_argument(
        "--health-probe-bind-address",
        type=_bind_address,
        default=":8081",
        metavar="ADDR",
        help="host:port for /healthz and /readyz; 0 disables (default: :8081)",
    )
    observability.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="auto",
        help="json (one object per line), text, or auto: text on a terminal, else json (default: auto)",
    )
    observability.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="(default: info)")
    observability.add_argument(
        "--event-qps",
        type=_non_negative_float,
        default=50.0,
        metavar="N",
        help="Kubernetes Event writes per second at most, after --event-burst; a burst of binds beyond "
        "that drops surplus Scheduled Events (the Run's status is the record); 0: no limit (default: 50)",
    )
    observability.add_argument(
        "--event-burst", type=_positive_int, default=100, metavar="N", help="Event writes back to back (default: 100)"
    )

    cycles = parser.add_argument_group("cycle log (every decision, replayable with `kruntimes replay`)")
    cycles.add_argument(
        "--cycle-log",
        metavar="FILE",
        help="append one JSON cycle record per line, files mode 0600 (default: off); must be writable at start-up",
    )
    cycles.add_argument(
        "--cycle-log-max-bytes",
        type=_positive_int,
        default=DEFAULT_MAX_BYTES,
        metavar="BYTES",
        help=f"rotate the file past this size (default: {DEFAULT_MAX_BYTES}, {DEFAULT_MAX_BYTES >> 20} MiB: "
        f"with the default backups at most {(DEFAULT_BACKUPS + 1) * DEFAULT_MAX_BYTES >> 20} MiB in all, half of "
        "the shipped Deployment's 64 Mi /tmp emptyDir; a log past its sizeLimit gets the pod evicted)",
    )
    cycles.add_argument(
        "--cycle-log-backups",
        type=_non_negative_int,
        default=DEFAULT_BACKUPS,
        metavar="N",
        help=f"rotated files kept as FILE.1..FILE.N (default: {DEFAULT_BACKUPS})",
    )


def _own_namespace() -> str:
    try:
        text = SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip()
    except OSError:
        return "default"
    return text or "default"


def options_from(args: argparse.Namespace) -> SchedulerOptions:
    """The flags as one options value (``SchedulerOptions.problems()`` checks the combinations)."""
    election: LeaderElectionOptions | None = None
    if args.leader_elect:
        election = LeaderElectionOptions(
            namespace=args.leader_elect_namespace or _own_namespace(),
            name=args.leader_elect_lease_name,
            lease_duration=args.leader_elect_lease_duration.total_seconds(),
            renew_deadline=args.leader_elect_renew_deadline.total_seconds(),
            retry_period=args.leader_elect_retry_period.total_seconds(),
        )
    return SchedulerOptions(
        namespaces=tuple(dict.fromkeys(args.namespaces)),
        workers=args.workers,
        queue_order=POLICIES[args.queue_order],
        leader_election=election,
        identity=args.leader_elect_identity or default_identity(),
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        heartbeat_stale_after=args.heartbeat_stale_after,
        cycle_log=Path(args.cycle_log) if args.cycle_log else None,
        cycle_log_max_bytes=args.cycle_log_max_bytes,
        cycle_log_backups=args.cycle_log_backups,
        event_qps=args.event_qps,
        event_burst=args.event_burst,
    )


def _usage_error(message: str) -> int:
    print(f"kruntimes scheduler: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    log_format: LogFormat = args.log_format
    configure_logging(log_format, args.log_level)
    options = options_from(args)
    problems = options.problems()
    if problems:
        return _usage_error("; ".join(problems))
    connected = connect(args.kubeconfig, args.context, user_agent=f"{USER_AGENT_PREFIX}/{options.identity}")
    if not is_successful(connected):
        return _usage_error(connected.failure().message)
    kube = connected.unwrap()
    scheduler = Scheduler(kube, options)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise SystemExit(EXIT_FAILED)  # a second signal: give up on a clean shutdown
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    previous = shutdown.install(on_signal)
    early = shutdown.early_signal()
    if early is not None:  # asked to stop while the process was still importing: nothing to undo
        log.info("shutting down before start", extra={"signal": signal.Signals(early).name})
        shutdown.restore(previous)
        kube.close()
        return EXIT_OK
    try:
        try:
            scheduler.start()
        except OSError as problem:
            log.error("cannot start", extra={"error": str(problem)})
            print(f"kruntimes scheduler: cannot bind an HTTP port: {problem}", file=sys.stderr)
            scheduler.stop(timeout=1.0)
            return EXIT_FAILED
        while not stop.wait(0.5):
            pass
        clean = scheduler.stop(timeout=30.0)
        return EXIT_OK if clean else EXIT_FAILED
    finally:
        shutdown.restore(previous)
        kube.close()
