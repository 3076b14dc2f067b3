"""What a watch event may have changed for the Pending Runs (SPEC §8), as signals.

Rule: an event says *where* something a waiting Run's decision reads has
changed, and the work queue's parking lot decides *which* parked Runs that
can help (``queueing.admit`` for room on a pod): so a released slot activates
the Runs that can use it, not every Pending Run of the runtime. Pending Runs
are found through indexes, never by a scan.

==============================================  ===========================================
event                                           signal
==============================================  ===========================================
Pending Run created, or changed in anything     ``Activate(key)``
its decision reads (not in the status the
scheduler itself writes while it waits)
Run leaves the active set (finished, reset,     ``Room(ns, runtime, its pod,
deleted) or moves off a pod                     "capacity_released")`` and ``Targets``
Run becomes active, or an active Run's          ``Targets(ns, labels)``
labels change
Runtime Pod appears, or changes phase,          ``Room(ns, runtime, pod, "runtime_pod",
deletion, readiness, heartbeat status or        grown=True)`` when it is available now
freshness, capacity or uid
Runtime Pod goes, comes back or is replaced     ``Targets(ns, labels)`` of the Runs bound to
under its name                                  it that stop or start counting (SPEC §1)
==============================================  ===========================================

"Active" here is active *on its pod* (``ClusterState.places``): a Run bound to a pod
that is gone or was replaced holds no room and is no target, so its finishing frees
nothing.

A heartbeat that only moves ``lastProbeTime`` on a pod that stays fresh
changes no decision and signals nothing (SPEC §11). A pod that becomes
unavailable or smaller signals nothing either: it cannot let a waiting Run in.
This is a purely computational module: ``now`` is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal, TypeAlias, final

from kruntimes.pure.model.messages import CONDITION_SCHEDULED
from kruntimes.pure.model.objects import PENDING, Labels, Run, RunKey, RuntimePod, SchedulerConfig
from kruntimes.pure.state.cluster import ClusterState, Event

__all__ = ["Activate", "Room", "Signal", "Targets", "WakeupSource", "signals"]

WakeupSource: TypeAlias = Literal["runtime_pod", "capacity_released"]
"""The ``source`` label of ``kruntimes_scheduler_pending_run_wakeups_total``."""


@final
@dataclass(frozen=True, slots=True)
class Activate:
    """The Run's own event: plan it (again)."""

    key: RunKey


@final
@dataclass(frozen=True, slots=True)
class Room:
    """``pod`` of (namespace, runtime) may have room for parked Runs."""

    namespace: str
    runtime: str
    pod: str
    source: WakeupSource
    grown: bool = False
    """The pod appeared, became available or grew: Runs no pod could hold may fit now."""


@final
@dataclass(frozen=True, slots=True)
class Targets:
    """Active Runs with these labels appeared or left in ``namespace``: Runs waiting on required
    (anti-)affinity whose terms match one of them may be placeable now."""

    namespace: str
    labels: tuple[Labels, ...]


Signal: TypeAlias = Activate | Room | Targets


def signals(
    old: ClusterState, new: ClusterState, event: Event, now: datetime, config: SchedulerConfig
) -> tuple[Signal, ...]:
    """The signals ``event`` causes, given the states before and after it."""
    obj = event.obj
    if isinstance(obj, Run):
        return _run_signals(old, event, obj)
    if isinstance(obj, RuntimePod):
        return _bound_signals(old, new, obj) + _pod_signals(old, new, obj, now, config.stale_after())
    return ()


def _run_signals(old: ClusterState, event: Event, run: Run) -> tuple[Signal, ...]:
    before = old.run(run.key)
    after = None if event.type == "DELETED" else run
    if event.type == "DELETED" and before is None:
        before = run  # deleted without our having seen it: trust the last state sent
    replanned = after is not None and after.status.pending and (before is None or _view(before) != _view(after))
    result: tuple[Signal, ...] = (Activate(run.key),) if replanned else ()
    was = before is not None and old.places(before)
    is_active = after is not None and old.places(after)  # (a Run's event leaves the pods as they were)
    if before is not None and was and (after is None or not is_active or after.status.assigned_pod != before.status.assigned_pod):
        result += (Room(before.namespace, before.runtime, before.status.assigned_pod, "capacity_released"),)
    if was != is_active or (before is not None and after is not None and was and not _same_target(before, after)):
        labels: list[Labels] = []
        for side, counts in ((before, was), (after, is_active)):
            if side is not None and counts and side.labels not in labels:
                labels.append(side.labels)
        result += (Targets(run.namespace, tuple(labels)),)
    return result


def _same_target(before: Run, after: Run) -> bool:
    return before.labels == after.labels and before.status.assigned_pod == after.status.assigned_pod


def _view(run: Run) -> Run:
    """The Run without what the scheduler itself writes while the Run waits (the phase
    ``Pending`` for an empty one, the message and the ``Scheduled`` condition) and without
    its resourceVersion: equal views plan alike."""
    status = run.status
    kept = tuple(c for c in status.conditions if c.type != CONDITION_SCHEDULED)
    phase = PENDING if status.pending else status.phase
    return replace(run, resource_version="", status=replace(status, phase=phase, message="", conditions=kept))


def _bound_signals(old: ClusterState, new: ClusterState, pod: RuntimePod) -> tuple[Signal, ...]:
    """A pod that went, came (back) or has another uid under its name turns the Runs bound to
    it with a uid off or on as affinity targets: the labels of those that changed."""
    before = old.pod(pod.namespace, pod.name)
    after = new.pod(pod.namespace, pod.name)
    before_uid = None if before is None else before.uid
    after_uid = None if after is None else after.uid
    if before_uid == after_uid:
        return ()
    labels: list[Labels] = []
    for name, uid in new.bound_to(pod.namespace, pod.name):
        if (uid == before_uid) != (uid == after_uid):
            run = new.run(RunKey(pod.namespace, name))
            if run is not None and run.labels not in labels:
                labels.append(run.labels)
    return (Targets(pod.namespace, tuple(labels)),) if labels else ()


def _pod_signals(
    old: ClusterState, new: ClusterState, pod: RuntimePod, now: datetime, stale_after: timedelta
) -> tuple[Signal, ...]:
    before = old.pod(pod.namespace, pod.name)
    after = new.pod(pod.namespace, pod.name)
    if after is None or not after.available(now, stale_after):
        return ()
    if before is not None and before.runtime == after.runtime and _pod_view(before, now, stale_after) == _pod_view(
        after, now, stale_after
    ):
        return ()
    return (Room(after.namespace, after.runtime, after.name, "runtime_pod", grown=True),)


_PodView: TypeAlias = tuple[str, str, bool, bool, bool, bool, tuple[tuple[str, object], ...]]


def _pod_view(pod: RuntimePod, now: datetime, stale_after: timedelta) -> _PodView:
    """Everything about a pod a placement decision reads; equal views decide alike."""
    return (
        pod.uid,
        pod.phase,
        pod.deleting,
        pod.ready,
        pod.heartbeat_ok,
        pod.heartbeat_fresh(now, stale_after),
        tuple(pod.capacity.items()),
    )
