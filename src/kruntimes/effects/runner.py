"""The scheduler process: informers, work queue, N workers, leader election, HTTP probes.

Threads (docs/operations.md, "Which thread spends the CPU", names them):

- one informer per (kind, namespace) — Runs, Runtime Pods (label ``runtime``),
  PersistentWorkspaces — each event one swap of the ``ClusterState`` atom and one
  call to ``on_event``, which turns ``pure.wakeups`` into queue adds;
- a control thread: waits for the caches to sync, then leads at once (no
  election) or campaigns for the Lease and re-campaigns after losing it;
- while leading: N workers, each taking one key at a time from this term's
  ``WorkQueue`` and running ``scheduling.SchedulingCycle`` on it;
- the event recorder's writer, the metrics and the probe HTTP servers.

Leadership terms: becoming leader resets the ledger to empty (a new leader
rebuilds usage from persisted assignments only, SPEC §6), relists every
informer when elected (a standby's watch may lag the previous leader's last
binds; nothing is planned until the consistent relist has been applied), then
creates a fresh queue, starts the workers and activates every Pending Run in
``queueing.initial_order``. Losing the lease stops the workers at once: the
queue shuts down and ``may_write`` turns false, so a cycle in flight writes
nothing more. A graceful ``stop()`` instead lets in-flight cycles finish their
writes *before* the lease is released (releasing first would let the next
leader plan against a ledger that lacks our in-flight reservation).

Standbys run the informers (warm caches, ready to take over) but no workers,
and write nothing.

Supervision (``threads.Supervisor``): every thread here runs under one supervisor. One
object whose handling raises is skipped (an informer's event, a worker's key, backed off; an
Event) and counted; a thread that cannot continue closes the write gate at once and fails both
probes, and ``failure`` names it: ``kruntimes scheduler`` then stops (releasing what it holds) and
exits non-zero, so the kubelet restarts it.

A server that lost its state (an informer sees a resourceVersion go back or a
"too large resource version" answer; the elector finds its Lease gone, replaced
or older: ``informer.py``, ``leader.py``) starts everything over from a fresh
read, as a new leader does: writes close at once, the term ends (its workers
stop), every informer relists trusting nothing it knew, and a new term opens on
those lists with an empty ledger. A standby only relists. In sharded mode the
cycles in flight finish, every informer relists, the ledger is emptied and every
Pending Run is activated again. Writes reopen once that is done.

Sharded mode (``shard_group``, ``--shard-by-namespace``): no election; every replica runs
its workers from the start and ``effects.sharding.ShardMember`` decides which namespaces it
owns. This class is that member's ``NamespaceHost``: a namespace taken gets its own three
informers (their first list is the new owner's consistent read), an empty ledger for it and
its Pending Runs activated once the lists are applied; a namespace let go has its keys
dropped, its informers stopped and its objects forgotten. The write gate is asked per
namespace, and a worker drops a key whose namespace is not open here.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Final, Literal, TypeAlias

from kruntimes.effects.clock import utcnow
from kruntimes.effects.atom import Atom
from kruntimes.effects.binder import DEFAULT_AMBIGUOUS_HOLD, Binder
from kruntimes.effects.cyclelog_writer import DEFAULT_BACKUPS, DEFAULT_MAX_BYTES, CycleLogWriter, unwritable
from kruntimes.effects.events import EventRecorder, EventSettings
from kruntimes.effects.informer import Informer, NamespaceScope, watched_pods, watched_runs, watched_workspaces
from kruntimes.effects.kube import Kube
from kruntimes.effects.leader import DEFAULT_LEASE_NAME, LeaderElectionConfig, LeaderElector, default_identity
from kruntimes.effects.secureserving import SecureServingOptions, secure_serving
from kruntimes.effects.sharding import ShardConfig, ShardMember
from kruntimes.effects.metrics import (
    ALL_ENDPOINTS,
    METRICS_ENDPOINTS,
    PROBE_ENDPOINTS,
    MetricsServer,
    Probes,
    SchedulerMetrics,
    ServerReset,
    serve,
)
from kruntimes.effects.scheduling import CycleResult, SchedulingCycle
from kruntimes.pure.model.times import format_duration
from kruntimes.pure.step import BackOff, RequeueAfter
from kruntimes.pure.parking import RECHECK_SECONDS
from kruntimes.effects.schedulingqueue import SchedulingQueue
from kruntimes.effects.threads import Supervisor
from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.ledger import EMPTY_LEDGER, Ledger, observe, release, without_namespace
from kruntimes.pure.sharding import group_problem
from kruntimes.pure.model.objects import Run, RunKey, SchedulerConfig, Workspace
from kruntimes.pure.queueing import FIFO, QueueOrder

log = logging.getLogger(__name__)

DISABLED: Final = "0"

Tickets: TypeAlias = list[tuple[Informer, int]]
"""Relists asked for: each informer with the ticket ``Informer.wait_relisted`` takes."""

SWEEP_INTERVAL: Final = 1.0
"""Seconds between two looks of the safety net at the parked Runs."""

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
class LeaderElectionOptions:
    """The Lease and its timings (SPEC §10; client-go's defaults)."""

    namespace: str = "default"
    """Where the Lease lives: the scheduler's own namespace in a cluster."""
    name: str = DEFAULT_LEASE_NAME
    lease_duration: float = 15.0
    """A standby takes over this long after the leader's last renewal (SIGKILL failover time)."""
    renew_deadline: float = 10.0
    """The leader stops working when it could not renew for this long (< lease_duration)."""
    retry_period: float = 2.0
    """Between acquire/renew attempts."""


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


@contextmanager
def _listening(flag: str, address: str) -> Iterator[None]:
    try:
        yield
    except OSError as problem:
        raise ListenError(flag, address, problem) from problem


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


def workspace_wakeups(old: ClusterState, new: ClusterState, event: Event) -> tuple[RunKey, ...]:
    """Pending Runs that reference a workspace whose placement-relevant fields changed.

    SPEC §8 lists no workspace rule; without one a Run waiting on
    ``WorkspaceUnavailable``/``WorkspacePlacement`` would wait for the 30 s
    fallback after its workspace became Bound. The cost is one index lookup: the
    Pending Runs that name this workspace, whatever their runtime (one of another
    runtime waits on the mismatch, which a change of the workspace's runtime may end),
    and not one Run of the backlog that names none.
    A purely computational function: it reads the two state values only.
    """
    workspace = event.obj
    if not isinstance(workspace, Workspace):
        return ()
    before = old.workspace(workspace.namespace, workspace.name)
    after = new.workspace(workspace.namespace, workspace.name)

    def view(w: Workspace | None) -> tuple[str, str, str, str] | None:
        return None if w is None else (w.runtime, w.mode, w.phase, w.bound_pod)

    if view(before) == view(after):
        return ()
    return tuple(sorted(new.pending_naming(workspace.namespace, workspace.name)))



class Scheduler:
    """The whole controller in one process; ``start()`` returns at once, ``stop()`` shuts down in order."""

    def __init__(
        self,
        kube: Kube,
        options: SchedulerOptions = SchedulerOptions(),
        *,
        clock: Callable[[], datetime] = utcnow,
        registry: Registry = DEFAULT_REGISTRY,
    ) -> None:
        problems = options.problems()
        if problems:
            raise ValueError("invalid scheduler options: " + "; ".join(problems))
        self._kube = kube
        self._options = options
        self._clock = clock
        self._config = SchedulerConfig(heartbeat_stale_after=options.heartbeat_stale_after)
        self._registry = registry
        self._metrics = SchedulerMetrics(registry)
        self._supervisor = Supervisor()
        self.state: Atom[ClusterState] = Atom(EMPTY_STATE)
        self.ledger: Atom[Ledger] = Atom(EMPTY_LEDGER)
        self._events = EventRecorder(
            kube,
            EventSettings(
                instance=options.identity,
                repeat_interval=options.event_repeat_interval,
                qps=options.event_qps,
                burst=options.event_burst,
            ),
            may_write=self._may_write,
            share=self._event_share,
            supervisor=self._supervisor,
        )
        self._cycle_log = (
            CycleLogWriter(options.cycle_log, max_bytes=options.cycle_log_max_bytes, backups=options.cycle_log_backups)
            if options.cycle_log is not None
            else None
        )
        self._cycle = SchedulingCycle(
            self.state,
            self.ledger,
            Binder(kube, hold=options.ambiguous_hold),
            self._metrics,
            config=self._config,
            registry=registry,
            events=self._events,
            cycle_log=self._cycle_log,
            may_write=self._may_write,
            now=clock,
        )
        self._shard: ShardMember | None = None
        self._by_namespace: dict[str, tuple[Informer, ...]] = {}
        """Sharded mode with ``--namespace``: the informers of each namespace this replica takes or owns."""
        self._scope: NamespaceScope | None = None
        """Sharded mode over every namespace: what the three cluster-wide informers keep."""
        self._scoped: tuple[Informer, ...] = ()
        """Those informers (started by the first round that takes a namespace)."""
        self._scope_change: Literal["", "rewatch", "relist"] = ""
        """What the round's calls ask of them at ``settle`` (guarded by ``_lock``)."""
        self._in_flight: dict[str, int] = {}
        """Sharded mode: cycles running now, by namespace (a namespace is let go when it has none)."""
        self._resets_asked = 0
        """Times the server was seen to lose its state (guarded by ``_lock``)."""
        self._resets_served = 0
        """The newest of those that a reset's fresh relists follow."""
        self._resetting = False
        """A reset thread runs (guarded by ``_lock``)."""
        self._writes_closed = False
        """A reset holds every write, from the moment the loss is seen until it is done (guarded by
        ``_lock``): an informer applies its fresh list before the term it serves has ended."""
        election = options.leader_election
        if options.shard_group is not None and election is not None:
            self._shard = ShardMember(
                kube,
                ShardConfig(
                    lease_namespace=election.namespace,
                    identity=options.identity,
                    group=options.shard_group,
                    namespaces=tuple(sorted(set(options.namespaces))),
                    lease_duration=election.lease_duration,
                    renew_deadline=election.renew_deadline,
                    retry_period=election.retry_period,
                ),
                self,
                on_handoff=self._metrics.count_handoff,
                supervisor=self._supervisor,
            )
            self._informers: tuple[Informer, ...] = ()
            if not options.namespaces:
                # one query for every namespace held (the API server leaves the others out): three
                # watches per replica, not three per namespace (docs/architecture.md, "Sharded mode")
                self._scope = NamespaceScope()
                self._scoped = self._informers_of(None, self._scope)
        else:
            namespaces: tuple[str | None, ...] = options.namespaces or (None,)
            self._informers = tuple(
                informer for namespace in dict.fromkeys(namespaces) for informer in self._informers_of(namespace)
            )
        metrics = self._metrics
        metrics.watch_events(self._events)
        metrics.watch_supervisor(self._supervisor)
        metrics.watch_informers(self._informers)
        shard = self._shard
        metrics.watch_leader(self._may_write_any if shard is None else shard.may_write_any)
        if shard is not None:
            metrics.watch_shard(shard)
        kube.observe(metrics.observe_request)
        self._gate_retry = options.leader_election.retry_period if options.leader_election is not None else 1.0
        """Seconds before a key refused by a closed write gate is tried again (the next renewal)."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._queue: SchedulingQueue | None = None
        self._workers: list[threading.Thread] = []
        self._leading = False
        self._terms = 0
        self._elector: LeaderElector | None = None
        self._control: threading.Thread | None = None
        self._servers: list[MetricsServer] = []
        self.metrics_url: str | None = None
        """``http://host:port`` of ``/metrics`` once started (``None`` when disabled)."""
        self.health_url: str | None = None
        """``http://host:port`` of ``/healthz`` and ``/readyz`` once started (``None`` when disabled)."""
        self.results: Callable[[CycleResult], None] | None = None
        """A hook called with every cycle's result (tests and the demo); must be quick."""

    def _informers_of(self, namespace: str | None, scope: NamespaceScope | None = None) -> tuple[Informer, ...]:
        """The three informers (Runs, Runtime Pods, workspaces) of one namespace, or of all (those
        ``scope`` keeps, when given)."""
        return tuple(
            Informer(self._kube, watched(namespace, scope), self.state, self._on_event,
                     watch_timeout=self._options.watch_timeout, on_listed=self._synced_one,
                     supervisor=self._supervisor, on_lost=self._server_lost)
            for watched in (watched_runs, watched_pods, watched_workspaces)
        )

    def _synced_one(self) -> None:
        """An informer's list is in (with one query for every namespace held, every take lists):
        in sharded mode a namespace may open now."""
        shard = self._shard
        if shard is not None:
            shard.nudge()

    def _event_share(self) -> float:
        """The part of the Event budget (``event_qps``, ``event_burst``) this process spends: all of
        it with one leader; sharded, one over the live replicas of the group, as this one sees them."""
        shard = self._shard
        return 1.0 if shard is None else 1.0 / max(1, shard.members)

    # --- public ---

    @property
    def shard(self) -> ShardMember | None:
        """Sharded mode's membership (``None`` with one leader)."""
        return self._shard

    @property
    def metrics(self) -> SchedulerMetrics:
        return self._metrics

    @property
    def options(self) -> SchedulerOptions:
        return self._options

    @property
    def informers(self) -> tuple[Informer, ...]:
        return self._informers

    @property
    def events(self) -> EventRecorder:
        return self._events

    @property
    def cycle_log(self) -> CycleLogWriter | None:
        return self._cycle_log

    def is_leader(self) -> bool:
        return self._leading

    @property
    def failure(self) -> str | None:
        """The thread that could not continue (this replica then writes nothing, its probes fail
        and its owner should stop it and exit non-zero); ``None`` while every thread runs."""
        return self._supervisor.failure

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self._informers)

    def ready(self) -> bool:
        """``/readyz``: caches synced and, when electing, the current leader is known (sharded:
        this replica is a member of its group)."""
        if self._supervisor.failure is not None:
            return False
        shard = self._shard
        if shard is not None:  # ready once in the group; namespaces come and go with their own lists
            return shard.joined and not self._stopping.is_set()
        if not self.has_synced() or self._stopping.is_set():
            return False
        if self._options.leader_election is None:
            return True
        elector = self._elector
        return self._leading or (elector is not None and (elector.is_leader() or elector.observed_holder != ""))

    def healthy(self) -> bool:
        """``/healthz``: no thread failed, and the informer threads (and, while leading, the
        workers) are alive."""
        if self._supervisor.failure is not None:
            return False  # stopping or not: a process that must be restarted
        if self._stopping.is_set():
            return True  # shutting down on purpose
        informers_alive = not any(informer.join(0) for informer in self._informers)
        workers = list(self._workers)
        return informers_alive and all(worker.is_alive() for worker in workers)

    def wait_ready(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            if self._stopping.wait(0.02):
                return False
        return True

    def wait_leading(self, timeout: float | None = None) -> bool:
        """Wait until this replica leads *and* its workers run (after the takeover relist)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not (self._leading and self._queue is not None):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            if self._stopping.wait(0.02):
                return False
        return True

    def start(self) -> None:
        """Bind the HTTP ports, start informers and the control thread; returns at once.

        Raises :class:`ListenError` when an address cannot be listened on.
        """
        tune_gc(freeze=False)
        self._start_servers()
        self._events.start()
        for informer in self._informers:
            informer.start()
        self._control = self._supervisor.thread(self._control_loop, "control")
        self._control.start()
        log.info(
            "scheduler started",
            extra={
                "identity": self._options.identity,
                "namespaces": ",".join(self._options.namespaces) or "(all)",
                "workers": self._options.workers,
                "leader_elect": self._options.leader_election is not None and self._shard is None,
                "shard_group": self._options.shard_group or "",
                "metrics": self.metrics_url or "disabled",
                "health": self.health_url or "disabled",
                "cycle_log": str(self._options.cycle_log) if self._options.cycle_log else "disabled",
            },
        )

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop taking keys, finish in-flight cycles, release the lease, stop everything.

        ``True`` when every worker finished within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        self._stopping.set()
        clean = self._stop_leading(graceful=True, timeout=timeout)
        shard = self._shard
        if shard is not None:  # the workers are done: release every namespace, leave the group
            shard.shutdown(timeout=min(5.0, max(0.1, deadline - time.monotonic())))
        with self._lock:
            elector = self._elector
        if elector is not None:
            elector.stop()
        control = self._control
        if control is not None:
            control.join(max(0.1, deadline - time.monotonic()))
            if elector is not None and not control.is_alive() and elector.is_leader():
                elector.release()  # the control thread failed while leading: let a standby in at once
        for informer in self._informers:
            informer.stop()
        for informer in self._informers:
            informer.join(max(0.1, deadline - time.monotonic()))
        self._events.stop(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
        for server in self._servers:
            server.close()
        self._servers = []
        if self._cycle_log is not None:
            self._cycle_log.close()
        log.info("scheduler stopped", extra={"clean": clean})
        return clean

    # --- HTTP ---

    def _start_servers(self) -> None:
        probes = Probes(ready=self.ready, healthy=self.healthy)
        options = self._options.metrics_secure
        secure = None if options is None else secure_serving(self._kube, options, self._metrics.registry)
        metrics = parse_bind_address(self._options.metrics_bind_address)
        health = parse_bind_address(self._options.health_probe_bind_address)
        registry, dropped = self._metrics.registry, self._metrics.count_dropped_connection
        if metrics is not None and metrics == health and metrics[1] != 0:
            with _listening("--metrics-bind-address and --health-probe-bind-address", self._options.metrics_bind_address):
                server = serve(registry, probes, metrics[0], metrics[1], endpoints=ALL_ENDPOINTS, secure=secure, on_drop=dropped)
            self._servers.append(server)
            self.metrics_url = self.health_url = server.url
            return
        try:
            if metrics is not None:
                with _listening("--metrics-bind-address", self._options.metrics_bind_address):
                    server = serve(registry, probes, metrics[0], metrics[1], endpoints=METRICS_ENDPOINTS, secure=secure, on_drop=dropped)
                self._servers.append(server)
                self.metrics_url = server.url
            if health is not None:
                with _listening("--health-probe-bind-address", self._options.health_probe_bind_address):
                    server = serve(registry, probes, health[0], health[1], endpoints=PROBE_ENDPOINTS, on_drop=dropped)
                self._servers.append(server)
                self.health_url = server.url
        except ListenError:
            for server in self._servers:
                server.close()
            self._servers = []
            raise

    # --- leadership ---

    def _control_loop(self) -> None:
        while not self.has_synced():
            if self._stopping.wait(0.02):
                return
        frozen = tune_gc(freeze=True)  # the listed caches are long-lived: never walk them again
        log.info("caches synced", extra={"runs": sum(1 for _ in self.state.get().runs()), "gc_frozen": frozen})
        election = self._options.leader_election
        shard = self._shard
        if election is None or shard is not None:
            self._start_leading()
            if shard is not None:  # every replica works; the namespaces it owns come and go
                shard.run()
            return
        config = LeaderElectionConfig(
            namespace=election.namespace,
            identity=self._options.identity,
            name=election.name,
            lease_duration=election.lease_duration,
            renew_deadline=election.renew_deadline,
            retry_period=election.retry_period,
        )
        self._supervisor.thread(partial(self._report_standby, election.retry_period), "standby").start()
        while not self._stopping.is_set():
            elector = LeaderElector(
                self._kube, config, self._start_leading, self._lost_leadership, on_server_reset=self._server_lost
            )
            with self._lock:
                if self._stopping.is_set():
                    return
                self._elector = elector
            ending = elector.run()
            if ending == "stopped":
                return
            log.warning("leadership lost; campaigning again as a standby", extra={"identity": config.identity})

    def _lost_leadership(self) -> None:
        election = self._options.leader_election
        self._stop_leading(graceful=False, timeout=election.renew_deadline if election is not None else 10.0)

    def _start_leading(self, relisted: Tickets | None = None) -> None:
        """Open a term; ``relisted``: the relists it waits for (a reset asked for them), where a
        takeover would ask for its own."""
        with self._lock:
            if self._stopping.is_set() or self._leading:
                return
            elector = self._elector
            if relisted is not None and elector is not None and not elector.is_leader():
                return  # the Lease was lost during a reset: a standby now
            self.ledger.reset(EMPTY_LEDGER)  # SPEC §6 failover: rebuild from persisted assignments only
            self._terms += 1
            self._leading = True
            term = self._terms
        if self._shard is not None or (self._options.leader_election is None and relisted is None):
            # the caches have just synced and nobody led before us; or, sharded, each namespace
            # is opened on its own once its informers listed it (open_namespace)
            self._open_term(term)
            return
        # called on the elector's thread, which must go back to renewing at once
        self._supervisor.thread(partial(self._take_over, term, relisted), f"takeover-{term}").start()

    # --- a server that lost its state ---

    def _server_lost(self, reason: ServerReset) -> None:
        """An informer or the elector saw the API server lose its state: start over from a fresh
        read. Called on their threads: returns at once, the reset runs on its own thread."""
        self._metrics.count_server_reset(reason)
        with self._lock:
            if self._stopping.is_set():
                return
            self._writes_closed = True
            self._resets_asked += 1
            if self._resetting:
                return  # that thread resets once more if its relists were asked before this
            self._resetting = True
        log.warning("the API server lost its state; relisting every cache and rebuilding the ledger",
                    extra={"reason": reason})
        self._supervisor.thread(self._reset_loop, "server-reset").start()

    def _reset_loop(self) -> None:
        while True:
            with self._lock:
                if self._stopping.is_set() or self._resets_served >= self._resets_asked:
                    self._resetting = self._writes_closed = False
                    return
            if self._shard is not None:
                self._reset_shards()
            else:
                self._reset_term()

    def _fresh_relists(self) -> Tickets:
        """Every informer relists trusting nothing it knew; the resets seen so far are served."""
        with self._lock:
            self._resets_served = self._resets_asked
        return [(informer, informer.request_relist(fresh=True)) for informer in self._informers]

    def _reset_term(self) -> None:
        """One leader: end the term (its workers stop, writes stop with them), relist, open a new
        term on the fresh lists with an empty ledger; a standby relists only."""
        with self._lock:
            leading = self._leading
        if not leading:
            self._fresh_relists()
            return
        election = self._options.leader_election
        self._stop_leading(graceful=False, timeout=election.renew_deadline if election is not None else 10.0)
        self._start_leading(self._fresh_relists())

    def _reset_shards(self) -> None:
        """Sharded (writes are closed): let the cycles in flight finish, relist, empty the ledger,
        activate every Pending Run again."""
        deadline = time.monotonic() + 10.0
        while self._in_flight and time.monotonic() < deadline and not self._stopping.wait(0.05):
            pass
        for informer, ticket in self._fresh_relists():
            while not informer.wait_relisted(ticket, 0.2):
                if self._stopping.is_set():
                    return
                if informer.join(0):
                    break  # its namespace was let go meanwhile: nothing of it to wait for
        self.ledger.reset(EMPTY_LEDGER)
        queue = self._queue
        if queue is not None:
            pending = queue.activate_pending()
            log.info("caches refreshed after the server lost its state", extra={"pending": pending})

    def _take_over(self, term: int, relisted: Tickets | None = None) -> None:
        """Plan nothing until every cache is at least as new as this term.

        A standby's watch may be behind the previous leader's last binds (a
        dropped or throttled watch, a reconnect back-off): planning from it
        would count a pod's usage short and overcommit it. A relist is a
        consistent read, so after it the state holds every assignment committed
        before we took the lease.
        """
        started = time.monotonic()
        warned = False
        tickets = relisted if relisted is not None else [(informer, informer.request_relist()) for informer in self._informers]
        for informer, ticket in tickets:
            while not informer.wait_relisted(ticket, 0.2):
                if not self._term_open(term):
                    return
                if not warned and time.monotonic() - started > 10.0:
                    warned = True
                    log.warning("leading, but the caches cannot be refreshed yet; not scheduling until they are",
                                extra={"kind": informer.kind})
        log.info("leading: caches refreshed", extra={"seconds": round(time.monotonic() - started, 3)})
        self._open_term(term)

    def _term_open(self, term: int) -> bool:
        return self._leading and self._terms == term and not self._stopping.is_set()

    def _open_term(self, term: int) -> None:
        """Start this term's queue and workers, and activate every Pending Run."""
        with self._lock:
            if not self._term_open(term) or self._queue is not None:
                return
            queue = SchedulingQueue(
                self.state,
                self.ledger,
                config=self._config,
                registry=self._registry,
                metrics=self._metrics,
                policy=self._options.queue_order,
                now=self._clock,
                safety_net=self._options.safety_net,
            )
            self._queue = queue
            self._metrics.watch_queue(queue)
            workers = [
                self._supervisor.thread(partial(self._work, queue), f"worker-{term}-{i}")
                for i in range(self._options.workers)
            ]
            for worker in workers:
                worker.start()
            self._workers = workers  # published once running, so /healthz never sees an unstarted one
            self._supervisor.thread(partial(self._sweep, queue), f"safety-net-{term}").start()
        pending = queue.activate_pending()
        log.info("leading: workers started", extra={"workers": self._options.workers, "pending": pending})

    def _stop_leading(self, *, graceful: bool, timeout: float) -> bool:
        """End this term: no more keys; a lost lease also forbids writes at once."""
        with self._lock:
            queue, self._queue = self._queue, None
            workers, self._workers = self._workers, []
            self._metrics.watch_queue(None)
            if not graceful:
                self._leading = False
        if queue is not None:
            queue.shutdown()
        deadline = time.monotonic() + timeout
        clean = True
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
            clean = clean and not worker.is_alive()
        if graceful and queue is not None:  # still leading: let this term's Events out before the release
            self._events.flush(timeout=max(0.0, min(2.0, deadline - time.monotonic())))
        with self._lock:
            was_leading = self._leading or queue is not None
            self._leading = False
        self._events.end_term()  # what is still queued belongs to a term that is over: never written
        self.ledger.reset(EMPTY_LEDGER)
        if was_leading and queue is not None:
            log.info("workers stopped", extra={"graceful": graceful, "clean": clean})
        return clean

    def _may_write(self, namespace: str) -> bool:
        """The write gate for one namespace: its shard's in sharded mode, else the leader's; shut
        for good once a thread failed (the state or the queue may be stale from then on)."""
        if self._supervisor.failure is not None or self._writes_closed:
            return False
        shard = self._shard
        if shard is not None:
            return self._leading and shard.may_write(namespace)
        return self._may_write_any()

    def _may_write_any(self) -> bool:
        if not self._leading or self._supervisor.failure is not None:
            return False
        elector = self._elector
        return elector is None or elector.may_write()

    # --- the worker loop and the informer callback ---

    def _work(self, queue: SchedulingQueue) -> None:
        work = queue.work
        shard = self._shard
        while True:
            key = work.get()
            if key is None:
                return
            if shard is not None and not self._begin(shard, key.namespace):
                work.forget(key)  # a namespace this replica let go of: its new owner plans it
                work.done(key)
                continue
            try:
                self._cycle_once(queue, key)
            finally:
                if shard is not None:
                    self._end(key.namespace)

    def _begin(self, shard: ShardMember, namespace: str) -> bool:
        """Count a cycle of ``namespace`` in flight if the namespace is open here."""
        with self._lock:
            if not shard.accepts(namespace):
                return False
            self._in_flight[namespace] = self._in_flight.get(namespace, 0) + 1
            return True

    def _end(self, namespace: str) -> None:
        with self._lock:
            left = self._in_flight.get(namespace, 0) - 1
            if left > 0:
                self._in_flight[namespace] = left
            else:
                self._in_flight.pop(namespace, None)

    def _cycle_once(self, queue: SchedulingQueue, key: RunKey) -> None:
        work = queue.work
        if queue.hold_until_seen(key):  # planned once the informer shows its last write
            work.done(key)
            return
        queue.started(key)
        try:
            result = self._cycle.run(key)
            after = result.next
            if result.outcome == "not_leader" and self._leading:
                # the write gate closed inside the term (a renewal late or a pause the Lease
                # outlived): this key waits for the gate, not for the next term's activation
                after = RequeueAfter(self._gate_retry)
            if result.written:
                queue.wrote(key, result.written)
            queue.after_cycle(key, after, run=result.run, landed=result.landed, freed=result.freed)
            hook = self.results
            if hook is not None:
                hook(result)
        except Exception as error:  # one bad Run must never kill a worker: its key is backed off
            self._supervisor.skipped("worker", "cycle", str(key), error)
            queue.after_cycle(key, BackOff())
        finally:
            work.done(key)

    def _sweep(self, queue: SchedulingQueue) -> None:
        """The safety net's clock: once a second, queue the parked Runs that are due."""
        while not queue.work.shutting_down:
            time.sleep(SWEEP_INTERVAL)
            queue.sweep()

    def _on_event(self, old: ClusterState, new: ClusterState, event: Event) -> None:
        obj = event.obj
        released = None
        shard = self._shard
        accepted = shard is None or shard.accepts(obj.namespace)
        if isinstance(obj, Run):
            # The informer's observation hands a reservation off to actual usage (SPEC §6) now,
            # rather than at the namespace's next cycle; a deleted Run frees its reservation.
            # Both are no-ops without a reservation for this Run: skip the swap (most events).
            if event.type == "DELETED" and accepted:  # a namespace let go drops its Events' dedup state at once
                self._events.drop_run(obj.namespace, obj.uid)
            held = self.ledger.get().get(obj.namespace, obj.uid)
            if held is not None:
                if event.type == "DELETED":
                    after = self.ledger.swap(lambda ledger: release(ledger, obj.namespace, obj.uid))
                else:
                    after = self.ledger.swap(lambda ledger: observe(ledger, obj))
                if after.get(obj.namespace, obj.uid) is None:
                    released = held
        queue = self._queue
        if queue is None or not accepted:  # not leading, caches not synced, or not this shard's:
            return  # activation happens when leading starts or the namespace opens
        queue.on_event(old, new, event, released)
        queue.activate(workspace_wakeups(old, new, event))

    # --- sharded mode: what the membership asks of one namespace (effects.sharding.NamespaceHost) ---

    def namespaces_known(self, namespaces: frozenset[str]) -> None:
        scope = self._scope
        if scope is not None and scope.know(namespaces):
            with self._lock:
                self._scope_change = self._scope_change or "rewatch"

    def settle(self) -> None:
        scope = self._scope
        if scope is None:
            return
        with self._lock:
            change, self._scope_change = self._scope_change, ""
            if self._stopping.is_set() or not change:
                return
            start = not self._informers
            if start:
                if change != "relist":
                    return  # nothing kept yet: nothing to watch
                self._informers = self._scoped
        if start:
            self._metrics.watch_informers(self._informers)
            for informer in self._informers:
                informer.start()
            return
        for informer in self._informers:
            if change == "relist":
                informer.request_relist()  # the new query, and a consistent read of what it adds
            else:
                informer.rewatch()  # the new query from the version already seen: it only leaves out more

    def watch_namespace(self, namespace: str) -> None:
        scope = self._scope
        if scope is not None:
            with self._lock:
                if self._stopping.is_set():
                    return
                if scope.kept_at(namespace) is None:
                    scope.keep(namespace)
                    self._scope_change = "relist"
            return
        with self._lock:
            if namespace in self._by_namespace or self._stopping.is_set():
                return
            informers = self._informers_of(namespace)
            self._by_namespace[namespace] = informers
            self._informers = tuple(i for group in self._by_namespace.values() for i in group)
        self._metrics.watch_informers(self._informers)
        for informer in informers:
            informer.start()

    def namespace_synced(self, namespace: str) -> bool:
        scope = self._scope
        if scope is not None:
            kept = scope.kept_at(namespace)
            scoped = self._informers
            return kept is not None and bool(scoped) and all(informer.listed(kept) for informer in scoped)
        informers = self._by_namespace.get(namespace)
        return informers is not None and all(informer.has_synced() for informer in informers)

    def open_namespace(self, namespace: str) -> None:
        self.ledger.swap(lambda ledger: without_namespace(ledger, namespace))
        queue = self._queue
        if queue is not None:
            pending = queue.activate_pending(namespace)
            log.info("namespace open", extra={"namespace": namespace, "pending": pending})

    def close_namespace(self, namespace: str) -> None:
        queue = self._queue
        if queue is not None:
            queue.drop_namespace(namespace)
        self._events.drop_namespace(namespace)

    def namespace_busy(self, namespace: str) -> bool:
        """A cycle of the namespace is running, or one of its Events is being sent."""
        with self._lock:
            cycling = self._in_flight.get(namespace, 0) > 0
        return cycling or self._events.writing(namespace)

    def unwatch_namespace(self, namespace: str) -> None:
        scope = self._scope
        if scope is not None:
            narrower = scope.drop(namespace)
            for informer in self._informers:
                informer.drop_namespace(namespace)
            if narrower:
                with self._lock:
                    self._scope_change = self._scope_change or "rewatch"
            self.ledger.swap(lambda ledger: without_namespace(ledger, namespace))
            return
        with self._lock:
            informers = self._by_namespace.pop(namespace, ())
            self._informers = tuple(i for group in self._by_namespace.values() for i in group)
        self._metrics.watch_informers(self._informers)
        for informer in informers:
            informer.stop()
        for informer in informers:
            if not informer.join(5.0):
                log.warning("an informer did not stop in time", extra={"namespace": namespace, "kind": informer.kind})
            informer.drop_all()
        self.ledger.swap(lambda ledger: without_namespace(ledger, namespace))

    # --- the standby's log line ---

    def _report_standby(self, interval: float) -> None:
        """Log once that this replica stands by, and for whom; again only when the holder changes.

        The elector's thread blocks in ``run()``; this one reads what it last
        observed at its own retry period. A term of our own resets it, so a
        replica that lost the lease says again whom it now stands by for.
        """
        reported = ""
        while not self._stopping.wait(interval):
            elector = self._elector
            if elector is None:
                continue
            if self._leading or elector.is_leader():
                reported = ""
                continue
            holder = elector.observed_holder
            if holder and holder != self._options.identity and holder != reported:
                reported = holder
                log.info("standing by", extra={"identity": self._options.identity, "holder": holder})
