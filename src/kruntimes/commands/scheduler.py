"""`kruntimes scheduler`: run the controller against a cluster until SIGTERM/SIGINT.

A thin shell: read the ``--config`` file, if any (``pure.readers.config``), lay
the flags over it (a flag given wins over the file's field), check the result (a
bad flag or field exits 2 with a one-line reason, never a traceback), set up
logging, connect, then hand everything to ``effects.runner.Scheduler``.

Leader election is on unless ``--leader-elect=false`` (kube-scheduler's default):
two schedulers that both bind would overcommit pods. The Lease's namespace is
the flag's, else the file's, else the pod's own (``$POD_NAMESPACE``, set by the
Deployment, or the service account's namespace file); outside a cluster there
is no safe guess, so it must be given. On SIGTERM or SIGINT it stops taking keys,
finishes the binds in flight, releases the lease and exits 0; a second signal
exits at once. When one of its threads cannot continue (``Scheduler.failure``) it
stops the same way on its own and exits 1, and so does a SIGTERM that comes after
such a failure: the kubelet restarts the container rather than take it for a clean exit.

One module at about 650 lines: most of it is the flag table and the rules that lay each flag over
the configuration file's field; the table, the merge and the checks name the same settings and
change together.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Final, TypeVar

import yaml
from returns.pipeline import is_successful

from kruntimes.pure.queueing import POLICIES
from kruntimes.commands import shutdown
from kruntimes.commands._yaml import SafeLoader
from kruntimes.effects.cyclelog_writer import DEFAULT_BACKUPS, DEFAULT_MAX_BYTES
from kruntimes.kubeclient.kube import connect
from kruntimes.effects.metrics import package_version
from kruntimes.kubeclient.ratelimit import DEFAULT_BURST, DEFAULT_QPS, RequestLimiter
from kruntimes.kubeclient.leader import default_identity
from kruntimes.pure.sharding import DEFAULT_GROUP
from kruntimes.effects.logs import LOG_FORMATS, LOG_LEVELS, LogFormat
from kruntimes.effects.logs import configure as configure_logging
from kruntimes.kubeclient.secureserving import DEFAULT_ALWAYS_ALLOW_PATHS, DEFAULT_CACHE_TTL, SecureServingOptions
from kruntimes.effects.runner import LeaderElectionOptions, ListenError, Scheduler, SchedulerOptions, parse_bind_address
from kruntimes.pure.model.objects import DEFAULT_CONFIG
from kruntimes.pure.model.times import format_duration, parse_duration
from kruntimes.pure.readers.config import (
    DEFAULT_CONFIGURATION,
    SchedulerConfiguration,
    decode_configuration,
    format_configuration,
)

log = logging.getLogger("kruntimes.scheduler")

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
USER_AGENT_PREFIX: Final = "kruntimes-scheduler"
POD_NAMESPACE_ENV: Final = "POD_NAMESPACE"
POD_NAME_ENV: Final = "POD_NAME"
DEPLOYMENT_NAMESPACE: Final = "kruntimes-system"
"""Where deploy/ runs the scheduler, and so where its Lease lives."""

_DESCRIPTION: Final = """\
Schedule Pending Runs onto warm Runtime Pods: watch Runs, Runtime Pods and
PersistentWorkspaces, plan each Run with the deterministic core (the same one
`kruntimes simulate` runs), reserve capacity atomically and write the Run's
status. Replicas elect a leader on a Lease (on by default): one schedules, the rest
wait warm; --leader-elect=false only where no other scheduler can run.
"""

_EPILOG: Final = """\
examples:
  # against the local dev cluster, alone: no election, metrics on a free port
  kruntimes dev-cluster --kubeconfig-out /tmp/dev.kubeconfig &
  kruntimes scheduler --kubeconfig /tmp/dev.kubeconfig --leader-elect=false --metrics-bind-address 127.0.0.1:0

  # in a cluster (as deploy/ runs it): two replicas, one leads (Lease in the pod's namespace)
  kruntimes scheduler --metrics-bind-address :8080 --health-probe-bind-address :8081

  # metrics over HTTPS for callers the API server authorises (deploy/components/metrics-secure)
  kruntimes scheduler --metrics-bind-address :8443 --metrics-secure --health-probe-bind-address :8081
  curl -k -H "Authorization: Bearer $(kubectl create token prometheus -n monitoring)" https://POD_IP:8443/metrics

  # sharded (deploy/overlays/sharded): four replicas split the namespaces, each schedules its own
  kruntimes scheduler --shard-by-namespace --metrics-bind-address :8080 --health-probe-bind-address :8081

  # from a workstation, next to the Deployment: the same Lease, so still one leader
  kruntimes scheduler --kubeconfig ~/.kube/config --leader-elect-resource-namespace kruntimes-system

  # settings from a file (flags given as well override its fields)
  kruntimes scheduler --print-default-config > scheduler.yaml   # every field, with its default
  kruntimes scheduler --config scheduler.yaml --workers 8

  # keep every decision for offline replay (/tmp: the shipped Deployment's writable emptyDir)
  kruntimes scheduler --cycle-log /tmp/kruntimes/cycles.jsonl
  kruntimes replay /tmp/kruntimes/cycles.jsonl

a --config file (every field optional but apiVersion and kind; unknown fields are errors):
  apiVersion: kruntimes.io/v1alpha1
  kind: SchedulerConfiguration
  workers: 8
  queueOrder: namespace-fair          # or fifo
  heartbeatStaleAfter: 30s
  leaderElection:
    resourceNamespace: kruntimes-system
  profiles:
    - schedulerName: default-scheduler
      plugins:
        score:
          disabled: [{name: PreferredRunAffinity}]   # "*": every score plugin
          enabled: [{name: LeastLoaded, weight: 3}]

Durations are Go style (500ms, 15s, 1m30s). SIGTERM/SIGINT: finish in-flight binds,
release the lease, exit 0. Exit 1: a thread could not continue (the log says which), or the
binds in flight did not finish in time. Exit 2: bad flags, a bad --config file, a kubeconfig that cannot
be loaded, or an address that cannot be listened on (in use, not this host's); one line says which.
"""


_Number = TypeVar("_Number", int, float)
_Value = TypeVar("_Value")


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


_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _boolean(text: str) -> bool:
    """A bool flag's value as kube-scheduler's (Go's ``strconv.ParseBool``) reads it."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def _cache_ttl(text: str) -> timedelta:
    parsed = parse_duration(text)
    if parsed is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 500ms, 10s, 1m)")
    if parsed < timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return parsed


def _paths(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def _metrics_secure(args: argparse.Namespace) -> SecureServingOptions | None:
    """The secure-serving options, or ``None``; TLS flags without ``--metrics-secure`` are a usage error."""
    if not args.metrics_secure:
        if args.tls_cert_file or args.tls_private_key_file:
            raise UsageError("--tls-cert-file and --tls-private-key-file only apply with --metrics-secure")
        return None
    return SecureServingOptions(
        cert_file=Path(args.tls_cert_file) if args.tls_cert_file else None,
        key_file=Path(args.tls_private_key_file) if args.tls_private_key_file else None,
        always_allow_paths=args.authorization_always_allow_paths,
        token_cache_ttl=args.authentication_token_webhook_cache_ttl.total_seconds(),
        allowed_cache_ttl=args.authorization_webhook_cache_authorized_ttl.total_seconds(),
        denied_cache_ttl=args.authorization_webhook_cache_unauthorized_ttl.total_seconds(),
    )


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
        "--kube-api-qps",
        type=_non_negative_float,
        default=DEFAULT_QPS,
        metavar="N",
        help="API requests per second at most, on average, after --kube-api-burst (every request, watches "
        "when they open; Events also within --event-qps); 0: no limit. Above the scheduler's measured peak, "
        f"so only a scheduler gone wrong is held back (default: {DEFAULT_QPS:g})",
    )
    cluster.add_argument(
        "--kube-api-burst",
        type=_positive_int,
        default=DEFAULT_BURST,
        metavar="N",
        help=f"API requests back to back before --kube-api-qps holds them back (default: {DEFAULT_BURST})",
    )
    cluster.add_argument(
        "--namespace",
        metavar="NS",
        action="append",
        dest="namespaces",
        default=[],
        help="schedule Runs of this namespace only; repeat for several (default: all namespaces)",
    )

    # Flags that a --config file can also set default to None: "not given", so the file's value stands.
    default = DEFAULT_CONFIGURATION
    files = parser.add_argument_group("configuration file")
    files.add_argument(
        "--config",
        metavar="FILE",
        help="a SchedulerConfiguration (YAML or JSON; example below); flags given as well override its fields",
    )
    files.add_argument(
        "--print-default-config",
        action="store_true",
        help="print the configuration used when no --config and no flag is given, as a --config file, and exit",
    )

    scheduling = parser.add_argument_group("scheduling")
    scheduling.add_argument(
        "--workers",
        type=_positive_int,
        metavar="N",
        help=f"Runs planned and bound in parallel (default: {default.workers})",
    )
    scheduling.add_argument(
        "--queue-order",
        choices=sorted(POLICIES),
        help="the order waiting Runs are served in: fifo (oldest first, across namespaces; the default) or "
        "namespace-fair (namespaces with waiting Runs take turns, oldest first within each, so a small "
        "tenant is not starved by a big one)",
    )
    scheduling.add_argument(
        "--heartbeat-stale-after",
        type=_stale_after,
        metavar="DURATION",
        help="a Runtime Pod whose runtimed heartbeat is older is unavailable (default: 15s; 0 means the default)",
    )

    election = parser.add_argument_group("leader election (on by default: replicas share one Lease, one schedules)")
    election.add_argument(
        "--leader-elect",
        type=_boolean,
        nargs="?",
        const=True,
        metavar="true|false",
        help="elect a leader on a coordination.k8s.io Lease before scheduling (default: true); "
        "--leader-elect=false only when no other scheduler can run against the cluster",
    )
    lease = default.leader_election
    election.add_argument(
        "--leader-elect-resource-name",
        "--leader-elect-lease-name",
        dest="leader_elect_resource_name",
        metavar="NAME",
        help=f"the Lease's name (default: {lease.resource_name})",
    )
    election.add_argument(
        "--leader-elect-resource-namespace",
        "--leader-elect-namespace",
        dest="leader_elect_resource_namespace",
        metavar="NS",
        help=f"the Lease's namespace (default in a cluster: the pod's own, from ${POD_NAMESPACE_ENV} or the service "
        f"account; outside a cluster it must be given: {DEPLOYMENT_NAMESPACE} to contend with the Deployment)",
    )
    election.add_argument(
        "--leader-elect-lease-duration",
        type=_duration,
        metavar="DURATION",
        help="a standby takes over this long after the leader's last renewal "
        f"(default: {format_duration(lease.lease_duration)})",
    )
    election.add_argument(
        "--leader-elect-renew-deadline",
        type=_duration,
        metavar="DURATION",
        help="the leader steps down when it could not renew for this long "
        f"(default: {format_duration(lease.renew_deadline)})",
    )
    election.add_argument(
        "--leader-elect-retry-period",
        type=_duration,
        metavar="DURATION",
        help=f"between attempts to acquire or renew (default: {format_duration(lease.retry_period)})",
    )
    election.add_argument(
        "--leader-elect-identity",
        metavar="ID",
        help=f"this replica's holder identity (default: ${POD_NAME_ENV}_<random>, else <hostname>_<random>); "
        "also in the User-Agent",
    )

    sharded = parser.add_argument_group(
        "sharded mode (opt-in: every replica schedules the namespaces it owns, handed over through Leases)"
    )
    sharded.add_argument(
        "--shard-by-namespace",
        action="store_true",
        help="split the namespaces between the replicas of --shard-group instead of electing one leader: each "
        "replica holds a membership Lease and writes only for the namespaces it owns (rendezvous hashing over the "
        "live members, at most ceil(namespaces/members) each); the Leases live in --leader-elect-resource-namespace "
        "and use the --leader-elect-* timings; --namespace, when given, lists the namespaces to share (default: "
        "every namespace, which needs RBAC to list namespaces). One namespace is never split",
    )
    sharded.add_argument(
        "--shard-group",
        metavar="NAME",
        default=DEFAULT_GROUP,
        help=f"replicas with the same group share the namespaces (a DNS label; default: {DEFAULT_GROUP})",
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
        "--metrics-secure",
        type=_boolean,
        nargs="?",
        const=True,
        default=False,
        metavar="true|false",
        help="serve the metrics port over HTTPS, and only to callers whose bearer token the API server "
        "authenticates (TokenReview: 401 otherwise) and who may GET the path (SubjectAccessReview, e.g. "
        'nonResourceURLs ["/metrics"]: 403 otherwise); the ServiceAccount needs create on both reviews. '
        "Probes on their own port stay plain HTTP (default: false: plain HTTP, no authentication)",
    )
    observability.add_argument(
        "--tls-cert-file",
        metavar="FILE",
        help="PEM certificate (chain) for --metrics-secure, re-read when it changes "
        "(default: a self-signed certificate made at start-up)",
    )
    observability.add_argument("--tls-private-key-file", metavar="FILE", help="the PEM key of --tls-cert-file")
    observability.add_argument(
        "--authorization-always-allow-paths",
        type=_paths,
        default=DEFAULT_ALWAYS_ALLOW_PATHS,
        metavar="PATHS",
        help="comma-separated paths --metrics-secure serves without a token; a trailing * matches a prefix "
        f"(default: {','.join(DEFAULT_ALWAYS_ALLOW_PATHS)})",
    )
    observability.add_argument(
        "--authentication-token-webhook-cache-ttl",
        type=_cache_ttl,
        default=timedelta(seconds=DEFAULT_CACHE_TTL),
        metavar="DURATION",
        help=f"how long a TokenReview's answer is reused (default: {DEFAULT_CACHE_TTL:g}s; 0: ask every time)",
    )
    observability.add_argument(
        "--authorization-webhook-cache-authorized-ttl",
        type=_cache_ttl,
        default=timedelta(seconds=DEFAULT_CACHE_TTL),
        metavar="DURATION",
        help=f"how long an allowing SubjectAccessReview is reused (default: {DEFAULT_CACHE_TTL:g}s)",
    )
    observability.add_argument(
        "--authorization-webhook-cache-unauthorized-ttl",
        type=_cache_ttl,
        default=timedelta(seconds=DEFAULT_CACHE_TTL),
        metavar="DURATION",
        help=f"how long a denying SubjectAccessReview is reused (default: {DEFAULT_CACHE_TTL:g}s)",
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
        "that drops surplus Scheduled Events (the Run's status is the record); 0: no limit. With "
        "--shard-by-namespace this is the group's budget: each replica spends its share, one over the live "
        "replicas (default: 50)",
    )
    observability.add_argument(
        "--event-burst",
        type=_positive_int,
        default=100,
        metavar="N",
        help="Event writes back to back (sharded: shared like --event-qps) (default: 100)",
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


class UsageError(Exception):
    """Flags and file that cannot run together; the message says how to fix them."""


def _own_namespace(environ: Mapping[str, str], service_account_namespace: Path) -> str | None:
    """The pod's namespace, or ``None`` outside a cluster."""
    if environ.get(POD_NAMESPACE_ENV):
        return environ[POD_NAMESPACE_ENV]
    try:
        text = service_account_namespace.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def _identity(environ: Mapping[str, str]) -> str:
    """``$POD_NAME_<random>`` in a pod (the name the Lease's holder is known by), else ``default_identity()``."""
    pod = environ.get(POD_NAME_ENV, "")
    return f"{pod}_{uuid.uuid4().hex[:10]}" if pod else default_identity()


def _given(flag: _Value | None, configured: _Value) -> _Value:
    return configured if flag is None else flag


def options_from(
    args: argparse.Namespace,
    configuration: SchedulerConfiguration = DEFAULT_CONFIGURATION,
    *,
    environ: Mapping[str, str] | None = None,
    service_account_namespace: Path | None = None,
) -> SchedulerOptions:
    """The file's settings with the flags given laid over them, as one options value.

    ``SchedulerOptions.problems()`` checks the combinations; raises :class:`UsageError` when
    leader election is on and nothing names the Lease's namespace.
    """
    env = os.environ if environ is None else environ
    account = SERVICE_ACCOUNT_NAMESPACE if service_account_namespace is None else service_account_namespace
    lease = configuration.leader_election
    election: LeaderElectionOptions | None = None
    electing = _given(args.leader_elect, lease.leader_elect)
    if args.shard_by_namespace and not electing:
        raise UsageError(
            "--shard-by-namespace hands namespaces over through Leases, so it cannot run with --leader-elect=false "
            "(drop it; the --leader-elect-* flags set the Leases' namespace and timings)"
        )
    if electing:
        namespace = (
            args.leader_elect_resource_namespace
            or lease.resource_namespace
            or _own_namespace(env, account)
        )
        if namespace is None:
            raise UsageError(
                f"{'sharded mode' if args.shard_by_namespace else 'leader election'} needs the Lease's namespace "
                "outside a cluster: pass "
                f"--leader-elect-resource-namespace NS ({DEPLOYMENT_NAMESPACE} shares the Deployment's Lease, so "
                "exactly one of them schedules), set leaderElection.resourceNamespace in the --config file, "
                f"or set ${POD_NAMESPACE_ENV}; --leader-elect=false runs without election (only when no other "
                "scheduler can run)"
            )
        election = LeaderElectionOptions(
            namespace=namespace,
            name=_given(args.leader_elect_resource_name, lease.resource_name),
            lease_duration=_given(args.leader_elect_lease_duration, lease.lease_duration).total_seconds(),
            renew_deadline=_given(args.leader_elect_renew_deadline, lease.renew_deadline).total_seconds(),
            retry_period=_given(args.leader_elect_retry_period, lease.retry_period).total_seconds(),
        )
    return SchedulerOptions(
        namespaces=tuple(dict.fromkeys(args.namespaces)),
        workers=_given(args.workers, configuration.workers),
        queue_order=POLICIES[_given(args.queue_order, configuration.queue_order)],
        leader_election=election,
        identity=args.leader_elect_identity or _identity(env),
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        metrics_secure=_metrics_secure(args),
        heartbeat_stale_after=_given(args.heartbeat_stale_after, configuration.heartbeat_stale_after),
        cycle_log=Path(args.cycle_log) if args.cycle_log else None,
        cycle_log_max_bytes=args.cycle_log_max_bytes,
        cycle_log_backups=args.cycle_log_backups,
        event_qps=args.event_qps,
        event_burst=args.event_burst,
        shard_group=args.shard_group if args.shard_by_namespace else None,
    )


def load_configuration_file(path: str) -> SchedulerConfiguration:
    """The ``--config`` file decoded; :class:`UsageError` names the file, the field and what is wrong."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as problem:
        raise UsageError(f"--config {path}: cannot read it: {problem}") from None
    try:
        document = yaml.load(text, Loader=SafeLoader)
    except yaml.YAMLError as problem:
        raise UsageError(f"--config {path}: not valid YAML: {' '.join(str(problem).split())}") from None
    except RecursionError:
        raise UsageError(f"--config {path}: nested too deeply") from None
    decoded = decode_configuration(document)
    if not is_successful(decoded):
        raise UsageError(f"--config {path}: {decoded.failure()}")
    return decoded.unwrap()


def _usage_error(message: str) -> int:
    print(f"kruntimes scheduler: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    if args.print_default_config:
        sys.stdout.write(format_configuration(DEFAULT_CONFIGURATION))
        return EXIT_OK
    log_format: LogFormat = args.log_format
    configure_logging(log_format, args.log_level)
    try:
        configuration = load_configuration_file(args.config) if args.config else DEFAULT_CONFIGURATION
        options = options_from(args, configuration)
    except UsageError as problem:
        return _usage_error(str(problem))
    problems = options.problems()
    if problems:
        return _usage_error("; ".join(problems))
    limiter = RequestLimiter(args.kube_api_qps, args.kube_api_burst)
    connected = connect(
        args.kubeconfig, args.context, user_agent=f"{USER_AGENT_PREFIX}/{options.identity}", limiter=limiter
    )
    if not is_successful(connected):
        return _usage_error(connected.failure().message)
    kube = connected.unwrap()
    log.info(
        "starting",
        extra={
            "version": package_version(),
            "python": platform.python_version(),
            "server": kube.host,
            "config": {
                "config-file": args.config or "",
                **options.effective(),
                "kube-api-qps": args.kube_api_qps,
                "kube-api-burst": args.kube_api_burst,
                "filters": [entry.name for entry in configuration.registry.filters],
                "scores": dict(configuration.registry.weights),
            },
        },
    )
    scheduler = Scheduler(kube, options, registry=configuration.registry)
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
        except ListenError as problem:
            scheduler.stop(timeout=1.0)
            return _usage_error(str(problem))
        except OSError as problem:  # a certificate or key of --metrics-secure that cannot be read, say
            scheduler.stop(timeout=1.0)
            print(f"kruntimes scheduler: cannot start: {problem}", file=sys.stderr)
            return EXIT_FAILED
        while not stop.wait(0.5):
            if scheduler.failure is not None:
                break
        clean = scheduler.stop(timeout=30.0)
        failure = scheduler.failure
        if failure is not None:
            log.error("exiting with an error: a thread could not continue", extra={"thread_name": failure})
            return EXIT_FAILED
        return EXIT_OK if clean else EXIT_FAILED
    finally:
        shutdown.restore(previous)
        kube.close()
