"""What ``kruntimes scheduler``'s flags set, and the process-wide settings they lead to: the
options and their checks, the listen addresses, the collector's tuning."""

from __future__ import annotations

import gc
import os
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Final

from kruntimes.effects.binder import DEFAULT_AMBIGUOUS_HOLD
from kruntimes.effects.cyclelog_writer import DEFAULT_BACKUPS, DEFAULT_MAX_BYTES, unwritable
from kruntimes.kubeclient.leader import DEFAULT_LEASE_NAME, LeaderElectionConfig, LeaseTimings, default_identity
from kruntimes.pure.parking import RECHECK_SECONDS
from kruntimes.kubeclient.secureserving import SecureServingOptions
from kruntimes.pure.model.times import format_duration
from kruntimes.pure.queueing import FIFO, QueueOrder
from kruntimes.pure.sharding import group_problem

DISABLED: Final = "0"

GC_GEN0_THRESHOLD: Final = 50_000
"""Allocations between young-generation collections (CPython's default is 700). The state is
made of many small immutable objects that live long; at 700 the collector walks the young
objects of every few watch events and promotes them only to scan them again in the older
generations (docs/performance.md, "Design measurements", has the figures). Nothing here builds reference cycles
at a high rate, so collecting
young objects every 50k allocations keeps memory bounded at a fraction of the cost."""
GC_TUNING_ENV: Final = "KRUNTIMES_SCHEDULER_GC"
"""``default`` leaves the collector as CPython sets it (benchmarks compare the two); anything else,
or unset, tunes it."""

_gc_tuned = False
_gc_lock = threading.Lock()


def tune_gc(*, freeze: bool) -> bool:
    """Raise the young-generation threshold (process-wide, once) and, with ``freeze``, move every
    object alive now — the caches just listed — to the permanent generation so later collections
    never walk them again. ``False`` when disabled through ``$KRUNTIMES_SCHEDULER_GC=default``."""
    global _gc_tuned
    if os.environ.get(GC_TUNING_ENV, "") == "default":
        return False
    with _gc_lock:
        if not _gc_tuned:
            _, gen1, gen2 = gc.get_threshold()
            gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
            _gc_tuned = True
    if freeze:
        gc.collect()
        gc.freeze()
    return True


@dataclass(frozen=True, slots=True)
class LeaderElectionOptions(LeaseTimings):
    """The Lease and its timings (SPEC §10; client-go's defaults)."""

    namespace: str = "default"
    """Where the Lease lives: the scheduler's own namespace in a cluster."""
    name: str = DEFAULT_LEASE_NAME


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """Everything ``kruntimes scheduler``'s flags set; the in-process API takes the same value."""

    namespaces: tuple[str, ...] = ()
    """Watch only these namespaces; empty watches all (one informer per kind then)."""
    workers: int = 4
    """Keys processed in parallel: planning is CPU, binding is I/O; the ledger makes N safe."""
    leader_election: LeaderElectionOptions | None = None
    """``None``: lead from the start (one replica). Set it whenever more than one replica runs."""
    identity: str = field(default_factory=default_identity)
    """Lease holder identity, Event ``reportingInstance`` and User-Agent suffix."""
    metrics_bind_address: str = ":8080"
    """``host:port`` for ``/metrics``; ``0`` disables; port 0 picks a free port."""
    health_probe_bind_address: str = ":8081"
    """``host:port`` for ``/healthz`` and ``/readyz``; ``0`` disables."""
    metrics_secure: SecureServingOptions | None = None
    """``--metrics-secure``: the metrics port over TLS, requests authorised by the API server; ``None``: plain HTTP."""
    queue_order: QueueOrder = FIFO
    """The order waiting Runs are served in (SPEC §8): ``FIFO`` (oldest first) or
    ``NAMESPACE_FAIR`` (namespaces take turns), or any ``queueing.QueueOrder``."""
    safety_net: float = RECHECK_SECONDS
    """Seconds after which a waiting Run whose group admitted nobody is planned again anyway."""
    heartbeat_stale_after: timedelta = timedelta(seconds=15)
    """A Runtime Pod whose heartbeat is older than this is unavailable; ``<= 0`` means the default, 15 s (SPEC §1)."""
    cycle_log: Path | None = None
    """Append every cycle's record here (``kruntimes replay`` re-plans it); ``None``: off."""
    cycle_log_max_bytes: int = DEFAULT_MAX_BYTES
    cycle_log_backups: int = DEFAULT_BACKUPS
    event_repeat_interval: float = 300.0
    """An unchanged ``FailedScheduling`` Event is repeated at most this often per Run."""
    event_qps: float = 50.0
    """Event writes per second at most after ``event_burst`` (``<= 0``: no limit); beyond, Events are dropped.
    Sharded, both are the group's: each replica spends one over the live replicas of it."""
    event_burst: int = 100
    watch_timeout: int = 300
    """Seconds the API server keeps one watch open before the informer re-watches."""
    ambiguous_hold: float = DEFAULT_AMBIGUOUS_HOLD
    """Seconds a bind whose outcome is unknown keeps its reservation before one read settles it:
    kube-apiserver's default ``--request-timeout``, after which the write can no longer land.
    Shorter only against a server whose request timeout is shorter (and in tests)."""
    shard_group: str | None = None
    """``--shard-by-namespace``: replicas of this group split the namespaces through Leases (in
    ``leader_election``'s namespace, with its timings) and each schedules only those it owns;
    ``None``: one leader schedules everything."""

    def effective(self) -> dict[str, object]:
        """The settings in force, by the flags that set them: the start-up log line shows them."""
        election = self.leader_election
        secure = self.metrics_secure
        found: dict[str, object] = {
            "namespaces": list(self.namespaces) or "(all)",
            "workers": self.workers,
            "queue-order": self.queue_order.name,
            "heartbeat-stale-after": format_duration(self.heartbeat_stale_after),
            "leader-elect": election is not None,
        }
        if election is not None:
            found.update(
                {
                    "leader-elect-resource-namespace": election.namespace,
                    "leader-elect-resource-name": election.name,
                    "leader-elect-lease-duration": format_duration(timedelta(seconds=election.lease_duration)),
                    "leader-elect-renew-deadline": format_duration(timedelta(seconds=election.renew_deadline)),
                    "leader-elect-retry-period": format_duration(timedelta(seconds=election.retry_period)),
                }
            )
        found.update(
            {
                "leader-elect-identity": self.identity,
                "shard-by-namespace": self.shard_group is not None,
                "shard-group": self.shard_group or "",
                "metrics-bind-address": self.metrics_bind_address,
                "health-probe-bind-address": self.health_probe_bind_address,
                "metrics-secure": secure is not None,
                "tls-cert-file": str(secure.cert_file) if secure is not None and secure.cert_file else "",
                "event-qps": self.event_qps,
                "event-burst": self.event_burst,
                "cycle-log": str(self.cycle_log) if self.cycle_log is not None else "",
                "cycle-log-max-bytes": self.cycle_log_max_bytes,
                "cycle-log-backups": self.cycle_log_backups,
            }
        )
        return found

    def problems(self) -> tuple[str, ...]:
        """Every reason these options cannot work; empty when valid."""
        found: list[str] = []
        if self.workers < 1:
            found.append("--workers must be at least 1")
        for flag, address in (
            ("--metrics-bind-address", self.metrics_bind_address),
            ("--health-probe-bind-address", self.health_probe_bind_address),
        ):
            try:
                parse_bind_address(address)
            except ValueError as problem:
                found.append(f"{flag}: {problem}")
        if self.metrics_secure is not None:
            if parse_bind_address(self.metrics_bind_address) is None:
                found.append("--metrics-secure needs a metrics port: --metrics-bind-address is 0")
            found.extend(self.metrics_secure.problems())
        if self.cycle_log_max_bytes <= 0:
            found.append("--cycle-log-max-bytes must be positive")
        if self.cycle_log_backups < 0:
            found.append("--cycle-log-backups must not be negative")
        if self.cycle_log is not None:
            # Opened here (created 0600) so that an unwritable path is a usage error before start-up.
            cannot = unwritable(self.cycle_log)
            if cannot is not None:
                found.append(f"--cycle-log: {cannot}")
        if self.leader_election is not None:
            election = self.leader_election
            config = LeaderElectionConfig(
                namespace=election.namespace,
                identity=self.identity,
                name=election.name,
                lease_duration=election.lease_duration,
                renew_deadline=election.renew_deadline,
                retry_period=election.retry_period,
            )
            found.extend(f"leader election: {p}" for p in config.problems())
        if self.shard_group is not None:
            if self.leader_election is None:
                found.append("--shard-by-namespace coordinates through Leases: it needs leader election's Lease settings")
            else:
                why = group_problem(self.shard_group)
                if why is not None:
                    found.append(f"--shard-group {self.shard_group!r} {why}")
        for namespace in self.namespaces:
            if not namespace or "/" in namespace:
                found.append(f"--namespace {namespace!r} is not a namespace name")
        return tuple(found)


class ListenError(Exception):
    """An address of the options cannot be listened on (in use, not this host's, not resolvable,
    a privileged port): which flag gave it, the address as given, and why."""

    def __init__(self, flag: str, address: str, cause: OSError) -> None:
        self.flag = flag
        self.address = address
        self.cause = cause
        why = cause.strerror if isinstance(cause.strerror, str) and cause.strerror else str(cause)
        why = why.split(" (while attempting to bind", 1)[0]  # socket.create_server's addition: the address again
        super().__init__(f"cannot listen on {flag} {address}: {why}")


def parse_bind_address(text: str) -> tuple[str, int] | None:
    """``:8080`` → all interfaces; ``127.0.0.1:0``; ``[::1]:8080``; ``0`` → disabled (``None``)."""
    text = text.strip()
    if text == DISABLED:
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"{text!r} is not host:port, :port or 0")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{text!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{text!r}: port {port} is out of range")
    return (host or "0.0.0.0", port)
