"""Which Run keys a watch event activates (SPEC §8).

Rule: wake a Pending Run only when something its decision reads may have
changed — its own object, capacity released on its runtime, or a Runtime Pod
of its runtime appearing, disappearing or changing availability or capacity.
A heartbeat that only moves ``lastProbeTime`` on a pod that stays fresh
changes no decision, so it wakes nothing (SPEC §11). Pending Runs are found
through the state's ``(namespace, runtime)`` index, never by a scan.

The rules read as a table:

==========================================  ==========================  =====================
event                                       keys                        source
==========================================  ==========================  =====================
Run created/updated while Pending           the Run itself              ``None``
Run leaves the active set (update/delete)   Pending of (ns, runtime)    ``capacity_released``
Runtime Pod created/deleted/changed (*)     Pending of (ns, runtime)    ``runtime_pod``
==========================================  ==========================  =====================

(*) phase, deletion, PodReady, heartbeat status, heartbeat freshness at
``now``, capacity, uid; a pod whose ``runtime`` label changes counts for both
runtimes. This is a purely computational module: ``now`` is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeAlias

from kruntimes.pure.state.cluster import ClusterState, Event
from kruntimes.pure.model.objects import Run, RunKey, RuntimePod, SchedulerConfig

WakeupSource: TypeAlias = Literal["runtime_pod", "capacity_released"]


@dataclass(frozen=True, slots=True)
class Wakeup:
    """Keys to activate, and why (the ``source`` label of the wakeups metric)."""

    keys: tuple[RunKey, ...]
    """Sorted, so activation order does not depend on hash order."""
    source: WakeupSource | None
    """``None``: the Run's own event (not counted as a wakeup)."""


def wakeups(
    old: ClusterState, new: ClusterState, event: Event, now: datetime, config: SchedulerConfig
) -> tuple[Wakeup, ...]:
    """The activations ``event`` causes, given the states before and after it.

    Never returns a ``Wakeup`` with no keys.
    """
    obj = event.obj
    if isinstance(obj, Run):
        return _run_wakeups(old, new, event, obj)
    if isinstance(obj, RuntimePod):
        return _pod_wakeups(old, new, obj, now, config.stale_after())
    return ()


def _pending_of(
    state: ClusterState, namespace: str, runtime: str, source: WakeupSource, exclude: RunKey | None
) -> tuple[Wakeup, ...]:
    keys = state.pending_keys(namespace, runtime)
    if exclude is not None:
        keys = keys - {exclude}
    if not keys:
        return ()
    return (Wakeup(tuple(sorted(keys)), source),)


def _run_wakeups(old: ClusterState, new: ClusterState, event: Event, run: Run) -> tuple[Wakeup, ...]:
    before = old.run(run.key)
    after = None if event.type == "DELETED" else run
    if event.type == "DELETED" and before is None:
        before = run  # deleted without our having seen it: trust the last state sent
    result: tuple[Wakeup, ...] = ()
    if after is not None and after.status.pending:
        result += (Wakeup((run.key,), None),)
    if before is not None and before.status.active and (after is None or not after.status.active):
        result += _pending_of(new, before.namespace, before.runtime, "capacity_released", run.key)
    return result


def _pod_wakeups(
    old: ClusterState, new: ClusterState, pod: RuntimePod, now: datetime, stale_after: timedelta
) -> tuple[Wakeup, ...]:
    before = old.pod(pod.namespace, pod.name)
    after = new.pod(pod.namespace, pod.name)
    runtimes: list[str] = []
    if before is not None and after is not None:
        if before.runtime != after.runtime:
            runtimes = [before.runtime, after.runtime]
        elif _decision_view(before, now, stale_after) != _decision_view(after, now, stale_after):
            runtimes = [after.runtime]
    elif before is not None:
        runtimes = [before.runtime]
    elif after is not None:
        runtimes = [after.runtime]
    result: tuple[Wakeup, ...] = ()
    for runtime in runtimes:
        result += _pending_of(new, pod.namespace, runtime, "runtime_pod", None)
    return result


_View: TypeAlias = tuple[str, str, bool, bool, bool, bool, tuple[tuple[str, object], ...]]


def _decision_view(pod: RuntimePod, now: datetime, stale_after: timedelta) -> _View:
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
