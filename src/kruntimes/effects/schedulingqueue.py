"""One leadership term's scheduling queue: the ordered work queue plus the parking lot (SPEC §8).

Where kube-scheduler has an activeQ (ordered by priority, then timestamp), a backoffQ
and an unschedulable pool with queueing hints and a periodic flush, this has:

- the **work queue** (``workqueue.WorkQueue``): ready keys in the policy's order
  (``queueing.QueueOrder``: oldest first, lanes per namespace for ``namespace-fair``),
  delayed requeues and per-key back-off;
- the **parking lot** (``parking.Parking``): Runs whose cycle ended in Wait, by
  (namespace, runtime, reason), until an event can help them;
- the **admission** of parked Runs when a pod has room (``queueing.admit``: in queue
  order, only those the pod can take, enough to fill it), chained: when a Run admitted
  for a pod ends its cycle without filling the pod, the pod's remaining room admits the
  next one;
- the **safety net** (``sweep``): a parked Run of a group that admitted nobody for 30 s
  is planned again;
- **blind** parking: a Run parked without a plan that saw an available pod (a new
  leader's backlog; a constrained Run planned while no pod was available) is planned
  again when a pod with room refuses it, so its waiting status is written against
  the pods that are there, not left to the safety net of a group being served;
- the **echo wait**: a Run whose wait message this scheduler just wrote is not planned
  again until the informer has shown that write (or :data:`ECHO_WAIT` passed): planned
  from the version before it, its bind would carry a stale resourceVersion and fail
  with a conflict, sending it back behind later Runs.

Every decision about *which* Runs an event helps is pure (``wakeups.signals``,
``queueing.admit``); this class keeps the mutable sets and the locks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Final, assert_never

from kruntimes.kubeclient.atom import Atom
from kruntimes.effects.metrics import SchedulerMetrics, WaitingReason
from kruntimes.effects.parking import Parking
from kruntimes.effects.queueorder import by_policy
from kruntimes.kubeclient.workqueue import WorkQueue
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.ledger import Ledger
from kruntimes.pure.model.objects import EMPTY_RESOURCES, Reservation, Resources, Run, RunKey, SchedulerConfig, Snapshot, epoch_us
from kruntimes.pure.parking import RECHECK_SECONDS, admission_groups, keeps_claim
from kruntimes.pure.planner import precheck
from kruntimes.pure.queueing import (
    FIFO,
    MAX_ADMISSION_WALK,
    NO_TIME_US,
    ParkReason,
    QueueEntry,
    QueueOrder,
    admit,
    entry_of,
    initial_order,
)
from kruntimes.pure.state.cluster import ClusterState, Event
from kruntimes.pure.step import BackOff, Forget, Next, Park, RequeueAfter
from kruntimes.pure.wakeups import Activate, Room, Targets, WakeupSource, signals


_UNKNOWN: Final = QueueEntry(RunKey("", ""))

ECHO_WAIT: Final = 1.0
"""Seconds a Run waits for the informer to show its own wait-message write before it is
planned anyway (a relist may skip that version; the bind's precondition still guards)."""


class SchedulingQueue:
    """The queue, the parking lot and the rules that move keys between them, for one term."""

    def __init__(
        self,
        state: Atom[ClusterState],
        ledger: Atom[Ledger],
        *,
        config: SchedulerConfig,
        registry: Registry,
        metrics: SchedulerMetrics,
        policy: QueueOrder = FIFO,
        now: Callable[[], datetime],
        clock: Callable[[], float] = time.monotonic,
        safety_net: float = RECHECK_SECONDS,
    ) -> None:
        self._state = state
        self._ledger = ledger
        self._config = config
        self._registry = registry
        self._metrics = metrics
        self._policy = policy
        self._now = now
        order, lane = by_policy(policy, self._entry)
        self.work: WorkQueue[RunKey] = WorkQueue(clock=clock, order=order, lane=lane, observer=metrics)
        self.parking = Parking(clock=clock, safety_net=safety_net)
        self._clock = clock
        self._echo_lock = threading.Lock()
        self._unseen: dict[RunKey, str] = {}
        """Runs whose wait write landed at this resourceVersion, not yet seen by the informer."""
        self._held: dict[RunKey, float] = {}
        """Of those, the ones dequeued meanwhile, and when they were first held."""

    # --- what the metrics read at scrape time -------------------------------------------------

    def depth(self) -> int:
        """Keys ready for a worker now."""
        return len(self.work)

    def waiting(self) -> dict[ParkReason, int]:
        """Parked Runs by reason."""
        return self.parking.counts()

    def oldest_waiting(self) -> dict[WaitingReason, int]:
        """The creation time (µs since the epoch) of the oldest Pending Run by how it waits:
        parked, by reason, or ``queued`` (ready, being planned, waiting out a back-off or a retry
        delay). Read at scrape time; costs the parking lot's groups and the queue's lane heads,
        delayed and in-flight keys, never the backlog."""
        found: dict[WaitingReason, int] = {reason: created for reason, created in self.parking.oldest().items()}
        state = self._state.get()
        queued = NO_TIME_US
        for key in self.work.heads():
            run = state.run(key)
            if run is not None and run.status.pending and run.creation_timestamp is not None:
                queued = min(queued, epoch_us(run.creation_timestamp))
        if queued < NO_TIME_US:
            found["queued"] = queued
        return found

    def _entry(self, key: RunKey) -> QueueEntry:
        run = self._state.get().run(key)
        return _UNKNOWN if run is None else entry_of(run)

    # --- a new term -------------------------------------------------------------------

    def activate_pending(self, namespace: str | None = None) -> int:
        """A new leader's backlog (or, with ``namespace``, the backlog of a namespace this
        replica just took in sharded mode): Runs a cycle must look at now (invalid, cancelled,
        due for a retry delay) are queued; the rest are parked, and every pod with room admits
        from its group, so the first cycles are binds, not a pass over the whole backlog."""
        state, now = self._state.get(), self._now()
        groups: set[tuple[str, str]] = set()
        runs = state.runs() if namespace is None else (run for run in state.runs() if run.namespace == namespace)
        pending = initial_order(runs, self._policy)
        for key in pending:
            run = state.run(key)
            if run is None:
                continue
            quick = Snapshot(key, run, (), (), None, None, now, self._config)
            if not run.runtime or precheck(quick) is not None:
                self.work.add(key)
            else:
                self.parking.park_unplanned(key, run.runtime, self._policy.sort_key(entry_of(run)))
                groups.add((key.namespace, run.runtime))
        for namespace, runtime in sorted(groups):
            for slot in state.pod_slots(namespace, runtime):
                self._admit(namespace, runtime, slot.pod.name, grown=True, source=None)
        return len(pending)

    # --- events -----------------------------------------------------------------------------

    def on_event(
        self, old: ClusterState, new: ClusterState, event: Event, released: Reservation | None = None
    ) -> None:
        """Turn one watch event's signals into activations. ``released``: a reservation the
        event ended without the Run becoming active (it finished, was reset or deleted
        before its bind was seen): its pod has that room back."""
        if isinstance(event.obj, Run):
            self._seen(event)
        now = self._now()
        if released is not None:
            run = new.run(RunKey(released.namespace, released.run_name))
            if run is None or not run.status.active:
                self.release(released)
        for signal in signals(old, new, event, now, self._config):
            if isinstance(signal, Activate):
                self.parking.unpark(signal.key)
                self.work.add(signal.key)
            elif isinstance(signal, Room):
                self.parking.touch(signal.namespace, signal.runtime)
                self._admit(signal.namespace, signal.runtime, signal.pod, grown=signal.grown, source=signal.source)
            elif isinstance(signal, Targets):
                self.parking.touch(signal.namespace)
                self._targets(new, signal)

    def drop_namespace(self, namespace: str) -> int:
        """This replica stopped scheduling ``namespace`` (sharded mode): its parked Runs and
        unseen writes are forgotten (queued keys are dropped by the worker that takes them)."""
        with self._echo_lock:
            for key in [k for k in self._unseen if k.namespace == namespace]:
                del self._unseen[key]
                self._held.pop(key, None)
        return self.parking.drop_namespace(namespace)

    def release(self, reservation: Reservation) -> None:
        """A reservation went without becoming usage: its pod may admit a waiting Run."""
        pod = self._state.get().pod(reservation.namespace, reservation.pod)
        if pod is None:
            return
        self.parking.touch(reservation.namespace, pod.runtime)
        self._admit(reservation.namespace, pod.runtime, reservation.pod, grown=False, source="capacity_released")

    def activate(self, keys: Iterable[RunKey]) -> None:
        """Queue these Runs now, parked or not (e.g. their workspace changed)."""
        for key in keys:
            self.parking.unpark(key)
            self.work.add(key)

    def _admit(self, namespace: str, runtime: str, pod: str, *, grown: bool, source: WakeupSource | None) -> None:
        if grown:  # the Runs no pod could hold that this one can hold wait for room from now on
            found = self._state.get().pod(namespace, pod)
            if found is not None and found.schedulable:
                self.parking.fit(namespace, runtime, found.capacity)
        parked = self.parking.parked(namespace, runtime, admission_groups(grown), MAX_ADMISSION_WALK)
        if not parked:
            return
        state = self._state.get()
        admission = admit(
            state, self._ledger.get(), parked, pod, self.parking.claimed(namespace, pod), self._now(), self._config, self._registry
        )
        if admission.refused:  # a Run parked blind that this room cannot take is planned again now
            for key in self.parking.plan_blind(admission.refused):
                self.work.add(key)
        chosen = admission.admitted
        if not chosen:
            return
        activated = self.parking.activate(chosen, pod=pod, requests=lambda key: _requests(state, key))
        if source is not None and activated:
            self._metrics.count_wakeups(source, len(activated))
        for key in activated:
            self.work.add(key)

    def _targets(self, state: ClusterState, signal: Targets) -> None:
        """Runs waiting on required (anti-)affinity whose terms match the labels that came or went."""
        woken: list[RunKey] = []
        for key in self.parking.parked_in(signal.namespace, "constraints"):
            run = state.run(key)
            if run is None:
                continue
            terms = run.affinity.required + run.affinity.anti_required
            if any(term.selector.matches(labels) for term in terms for labels in signal.labels):
                woken.append(key)
        for key in self.parking.activate(woken):
            self.work.add(key)

    # --- a Run's own writes ---------------------------------------------------------------------

    def wrote(self, key: RunKey, version: str) -> None:
        """``key``'s wait message landed as ``version``: until the informer shows it, a cycle
        would plan from the version before. (Checked against the state under the lock
        :meth:`_seen` takes after the informer's swap, so an echo that came first is not missed.)"""
        with self._echo_lock:
            run = self._state.get().run(key)
            if run is not None and run.status.pending and run.resource_version != version:
                self._unseen[key] = version

    def hold_until_seen(self, key: RunKey) -> bool:
        """Whether the worker must skip ``key``'s cycle now: its own write is not in the state
        yet. Its echo queues it again; so does :data:`ECHO_WAIT`, after which it is planned."""
        with self._echo_lock:
            if key not in self._unseen:
                return False
            now = self._clock()
            since = self._held.setdefault(key, now)
            if now - since >= ECHO_WAIT:
                del self._unseen[key], self._held[key]
                return False
        self.work.add_after(key, ECHO_WAIT - (now - since))
        return True

    def _seen(self, event: Event) -> None:
        obj = event.obj
        key = RunKey(obj.namespace, obj.name)
        with self._echo_lock:
            version = self._unseen.get(key)
            if version is None or (event.type != "DELETED" and obj.resource_version != version):
                return
            del self._unseen[key]
            held = self._held.pop(key, None) is not None
        if held:
            self.work.add(key)

    # --- a cycle's end --------------------------------------------------------------------------

    def started(self, key: RunKey) -> None:
        self.parking.started(key)

    def after_cycle(
        self,
        key: RunKey,
        next_: Next,
        *,
        run: Run | None = None,
        landed: str = "",
        freed: Reservation | None = None,
    ) -> None:
        """Carry out what ``key``'s cycle decided the queue does next (``run``: the Run it
        planned, which a ``Park`` parks); give the room a reservation it gave back (``freed``)
        to the parked Runs; move the claims to the pod its reservation ``landed`` on; then let
        the pod it was admitted for, if any, admit the next Run into what room is left."""
        work = self.work
        if isinstance(next_, Park):
            assert run is not None, "a cycle parks the Run it planned"
            order = self._policy.sort_key(entry_of(run))
            parked = self.parking.park(key, run.runtime, next_.group, order, blind=next_.blind, requests=run.requests)
            work.forget(key)
            if not parked:
                work.add(key)  # something it reads changed while it was planned
        else:
            self.parking.unpark(key)
            if isinstance(next_, Forget):
                work.forget(key)
            elif isinstance(next_, RequeueAfter):
                work.forget(key)
                work.add_after(key, next_.seconds)
            elif isinstance(next_, BackOff):
                work.add_rate_limited(key, next_.at_least)
            else:
                assert_never(next_)
        if freed is not None:
            self.release(freed)
        if landed:  # its room, wherever the cycle put it (a claim it displaced moves)
            self.parking.placed(key, landed)
        if keeps_claim(next_):
            return
        slot = self.parking.finished(key)
        if slot is not None:  # the pod it was admitted for (if still there) may take the next one
            namespace, pod = slot
            found = self._state.get().pod(namespace, pod)
            if found is not None:
                self._admit(namespace, found.runtime, pod, grown=False, source=None)

    def sweep(self) -> int:
        """The safety net: queue the parked Runs that are due; how many."""
        due = self.parking.due()
        for key in due:
            self.work.add(key)
        return len(due)

    def shutdown(self) -> None:
        self.work.shutdown()


def _requests(state: ClusterState, key: RunKey) -> Resources:
    run = state.run(key)
    return EMPTY_RESOURCES if run is None else run.requests
