"""The ``Scheduler``: it builds the informers, queue, workers, metrics and servers, starts and
stops them, and runs the leadership terms (``kruntimes.effects.runner`` describes the threads).

It stays one class of about 600 lines: opening and ending a term, the worker loop, the informer
callback and the reset after a server lost its state all read and change the same few fields
(``_leading``, ``_queue``, ``_workers``, the write gate) under one lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Final, TypeAlias

from kruntimes.kubeclient.clock import utcnow
from kruntimes.kubeclient.atom import Atom
from kruntimes.effects.binder import Binder
from kruntimes.effects.cyclelog_writer import CycleLogWriter
from kruntimes.effects.events import RunEvents
from kruntimes.kubeclient.events import EventSettings
from kruntimes.effects.informer import Informer, NamespaceScope, watched_pods, watched_runs, watched_workspaces
from kruntimes.kubeclient.kube import Kube
from kruntimes.kubeclient.leader import LeaderElector
from kruntimes.effects.runner.election import Election
from kruntimes.effects.runner.shardhost import ShardHost
from kruntimes.effects.runner.options import SchedulerOptions, tune_gc
from kruntimes.effects.runner.servers import start_servers
from kruntimes.effects.sharding import ShardConfig, ShardMember
from kruntimes.effects.metrics import MetricsServer, Probes, SchedulerMetrics, ServerReset
from kruntimes.effects.scheduling import CycleResult, SchedulingCycle
from kruntimes.pure.step import BackOff, RequeueAfter
from kruntimes.effects.schedulingqueue import SchedulingQueue
from kruntimes.kubeclient.threads import Supervisor
from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.ledger import EMPTY_LEDGER, Ledger, observe, release
from kruntimes.pure.model.objects import Run, RunKey, SchedulerConfig, Workspace

log = logging.getLogger("kruntimes.effects.runner")
"""One logger for the whole package: the scheduler's lines keep the name operators filter on."""

Tickets: TypeAlias = list[tuple[Informer, int]]
"""Relists asked for: each informer with the ticket ``Informer.wait_relisted`` takes."""

SWEEP_INTERVAL: Final = 1.0
"""Seconds between two looks of the safety net at the parked Runs."""


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
        self._events = RunEvents(
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
        self._host: ShardHost | None = None
        """Sharded mode: the namespaces this replica takes and lets go, and its membership."""
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
            self._informers: tuple[Informer, ...] = ()
            self._host = ShardHost(
                self,
                ShardConfig(
                    lease_namespace=election.namespace,
                    identity=options.identity,
                    group=options.shard_group,
                    namespaces=tuple(sorted(set(options.namespaces))),
                    lease_duration=election.lease_duration,
                    renew_deadline=election.renew_deadline,
                    retry_period=election.retry_period,
                ),
                every_namespace=not options.namespaces,
            )
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
        self._election = (
            Election(self, options.leader_election)
            if options.leader_election is not None and self._shard is None
            else None
        )
        """Elected mode: the campaigns for the Lease (``None`` leading from the start, or sharded)."""
        self._control: threading.Thread | None = None
        self._servers: list[MetricsServer] = []
        self.metrics_url: str | None = None
        """``http://host:port`` of ``/metrics`` once started (``None`` when disabled)."""
        self.health_url: str | None = None
        """``http://host:port`` of ``/healthz`` and ``/readyz`` once started (``None`` when disabled)."""
        self.results: Callable[[CycleResult], None] | None = None
        """A hook called with every cycle's result (tests and the demo); must be quick."""

    @property
    def _shard(self) -> ShardMember | None:
        host = self._host
        return None if host is None else host.member

    @property
    def _elector(self) -> LeaderElector | None:
        """The current campaign's elector, in elected mode."""
        election = self._election
        return None if election is None else election.elector

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
    def events(self) -> RunEvents:
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
        servers, self.metrics_url, self.health_url = start_servers(
            self._kube, self._options, self._metrics, Probes(ready=self.ready, healthy=self.healthy)
        )
        self._servers = servers
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

    # --- leadership ---

    def _control_loop(self) -> None:
        while not self.has_synced():
            if self._stopping.wait(0.02):
                return
        frozen = tune_gc(freeze=True)  # the listed caches are long-lived: never walk them again
        log.info("caches synced", extra={"runs": sum(1 for _ in self.state.get().runs()), "gc_frozen": frozen})
        election = self._election
        shard = self._shard
        if election is None:
            self._start_leading()
            if shard is not None:  # every replica works; the namespaces it owns come and go
                shard.run()
            return
        election.campaign()
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
            if self._host is not None:
                self._host.reset()
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
        host = self._host
        while True:
            key = work.get()
            if key is None:
                return
            if host is not None and not host.begin(key.namespace):
                work.forget(key)  # a namespace this replica let go of: its new owner plans it
                work.done(key)
                continue
            try:
                self._cycle_once(queue, key)
            finally:
                if host is not None:
                    host.end(key.namespace)

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
                self._events.drop_object(obj.namespace, obj.uid)
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
