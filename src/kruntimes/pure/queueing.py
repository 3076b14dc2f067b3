"""Queue order and admission: which waiting Run goes next, and which a freed pod can take (SPEC §8).

**Order** is a policy: a pure function of what the queue knows of a Run (its
key, creation time, uid and requests), in two parts — ``lane`` (the queue
takes turns between lanes with ready keys, round robin in lane order) and
``sort_key`` (oldest first within a lane). ``fifo`` has one lane, so it is
creation order across namespaces; ``namespace-fair`` has a lane per namespace,
so a namespace with 500 queued Runs is served as often as one with 8,000.
A Run keeps its place when it is activated again: its key depends on the Run,
never on when it was activated.

**Parking.** A Run whose cycle ended in ``Wait`` is parked under a
:data:`ParkReason`: what kind of change could let it be placed. ``capacity``
(every pod was full or unavailable) and ``constraints`` (required affinity,
anti-affinity or workspace placement rejected some pod) wait for room on a
pod they could use; ``unfit`` (no schedulable pod could hold the request even
empty, or there is no schedulable pod) waits for a Runtime Pod to appear or
grow, and from the first one that could hold it empty waits for room like
``capacity`` (the parking lot moves it there). :func:`admit` decides which
parked Runs a pod with free room can take: walked in queue order, each is
checked against that one pod with the registry's own filters, and admitted
while the pod has room for it — so the freed capacity activates the Runs that
can use it, enough to use it, and a Run that cannot use it (affinity, a request
that does not fit) never holds back a later one that can. A Run parked
*blind* (:func:`parked_blind`, or a new leader's backlog, parked unplanned)
is planned again as soon as a pod with room refuses it: its wait message was
not written against the pods that are there now.

This is a purely computational module; the work queue and the parking lot
themselves live in ``effects/``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final, Literal, Protocol, TypeAlias, final

from returns.pipeline import is_successful

from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.framework.runtime import run_filters
from kruntimes.pure.ledger import Ledger
from kruntimes.pure.model.objects import (
    EMPTY_RESOURCES,
    RUNS_RESOURCE,
    PodSlot,
    Resources,
    Run,
    RunKey,
    SchedulerConfig,
    Snapshot,
    epoch_us,
    frozen_resources,
)
from kruntimes.pure.model.plan import Wait
from kruntimes.pure.model.resources import fits, plus_reserved
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.placement import proven_for
from kruntimes.pure.snapshot import pod_slot, take
from kruntimes.pure.state.cluster import ClusterState

__all__ = [
    "Admission",
    "FIFO",
    "MAX_ADMISSION_WALK",
    "NAMESPACE_FAIR",
    "POLICIES",
    "Fifo",
    "NamespaceFair",
    "ParkReason",
    "QueueEntry",
    "QueueOrder",
    "SortKey",
    "admit",
    "entry_of",
    "initial_order",
    "park_reason",
    "parked_blind",
]

SortKey: TypeAlias = tuple[int, str, str]
"""(creation time in µs since the epoch — no time sorts last —, namespace, name)."""

NO_TIME_US: Final = 1 << 62
"""The creation time a Run without one sorts by: after every real one."""


@final
@dataclass(frozen=True, slots=True)
class QueueEntry:
    """What an ordering policy may look at for one queued Run."""

    key: RunKey
    creation_timestamp: datetime | None = None
    uid: str = ""
    requests: Resources = field(default_factory=lambda: EMPTY_RESOURCES)

    @property
    def namespace(self) -> str:
        return self.key.namespace


def entry_of(run: Run) -> QueueEntry:
    return QueueEntry(run.key, run.creation_timestamp, run.uid, run.requests)


class QueueOrder(Protocol):
    """An ordering policy: a lane to take turns between, and a total order within a lane."""

    @property
    def name(self) -> str: ...

    def lane(self, entry: QueueEntry) -> str: ...

    def sort_key(self, entry: QueueEntry) -> SortKey: ...


def _age(entry: QueueEntry) -> SortKey:
    created = entry.creation_timestamp
    return (NO_TIME_US if created is None else epoch_us(created), entry.key.namespace, entry.key.name)


@final
@dataclass(frozen=True, slots=True)
class Fifo:
    """Oldest first by (creationTimestamp, namespace, name), across every namespace."""

    name: str = "fifo"

    def lane(self, entry: QueueEntry) -> str:
        return ""

    def sort_key(self, entry: QueueEntry) -> SortKey:
        return _age(entry)


@final
@dataclass(frozen=True, slots=True)
class NamespaceFair:
    """Namespaces with queued Runs take turns (round robin by name); oldest first within one."""

    name: str = "namespace-fair"

    def lane(self, entry: QueueEntry) -> str:
        return entry.key.namespace

    def sort_key(self, entry: QueueEntry) -> SortKey:
        return _age(entry)


FIFO: Final = Fifo()
NAMESPACE_FAIR: Final = NamespaceFair()
POLICIES: Final[Mapping[str, QueueOrder]] = {FIFO.name: FIFO, NAMESPACE_FAIR.name: NAMESPACE_FAIR}
"""The built-in policies by the name ``--queue-order`` takes; a library user passes any ``QueueOrder``."""
_f: QueueOrder = FIFO
_n: QueueOrder = NAMESPACE_FAIR


def initial_order(runs: Iterable[Run], policy: QueueOrder = FIFO) -> tuple[RunKey, ...]:
    """The Pending Runs' keys in ``policy``'s order within a lane (oldest first: creationTimestamp,
    missing last, then namespace, then name; names compare by code point, i.e. UTF-8 byte order)."""
    entries = [entry_of(run) for run in runs if run.status.pending]
    entries.sort(key=policy.sort_key)
    return tuple(entry.key for entry in entries)


# --- parking and admission ------------------------------------------------------------------

ParkReason: TypeAlias = Literal["capacity", "constraints", "unfit"]

_ONE_RUN: Final[Resources] = frozen_resources({RUNS_RESOURCE: 1})

MAX_ADMISSION_WALK: Final = 256
"""Parked Runs :func:`admit` examines for one pod at most: a bound on the work one event costs.
Runs past it that could use the pod are reached by the next event or the safety net."""


def park_reason(snapshot: Snapshot, wait: Wait, registry: Registry = DEFAULT_REGISTRY) -> ParkReason:
    """What kind of change could let a waiting Run be placed (see the module docstring): a
    rejection whose filter declares it ``constraints`` (``FilterPlugin.park_kinds``) parks it
    there; else ``unfit`` or ``capacity``."""
    kinds = {entry.name: entry.plugin.park_kinds for entry in registry.filters}
    for plugin, reason, _ in wait.rejections:
        declared = kinds.get(plugin)
        if declared is not None and declared.get(reason) == "constraints":
            return "constraints"
    run = snapshot.run
    if run is not None and not any(
        slot.pod.schedulable and fits(slot.pod.capacity, EMPTY_RESOURCES, run.requests) for slot in snapshot.pods
    ):
        return "unfit"
    return "capacity"


def parked_blind(snapshot: Snapshot) -> bool:
    """Whether a Run parked after this snapshot's Wait must be planned again as soon as a pod
    with room refuses it: it has required affinity or anti-affinity terms or a workspace, and
    no pod was available when it was planned. Its wait message then says only that it waits
    for pods; once pods are back, admission never takes it while its constraint holds, so
    without a new plan the message would stay untrue while its group is being served. Planned
    again with pods available it is parked for its constraint, so this costs one cycle per
    return of the pods, not one per event."""
    run = snapshot.run
    if run is None or not (run.affinity.required or run.affinity.anti_required or run.workspace is not None):
        return False
    stale_after = snapshot.config.stale_after()
    return not any(slot.pod.available(snapshot.now, stale_after) for slot in snapshot.pods)


@final
@dataclass(frozen=True, slots=True)
class Admission:
    """What one pod with room made of the parked Runs it examined, in queue order."""

    admitted: tuple[RunKey, ...] = ()
    """The Runs it can take now."""
    refused: tuple[RunKey, ...] = ()
    """The Runs a filter refused while the pod still had room for a Run: they cannot use this
    room (affinity, workspace, a request larger than what is free)."""


def admit(
    state: ClusterState,
    ledger: Ledger,
    parked: Iterable[RunKey],
    pod: str,
    claimed: Resources,
    now: datetime,
    config: SchedulerConfig,
    registry: Registry = DEFAULT_REGISTRY,
) -> Admission:
    """The parked Runs (given in queue order) that ``pod`` can take now, and those it refused.

    ``claimed``: the requests of Runs already activated for this pod whose cycles
    have not ended. Each parked Run is judged by the registry's filters on this
    one pod (its usage + the ledger's reservations + ``claimed`` + the Runs
    admitted before it), so a Run is admitted only if its cycle could bind it
    here; the walk stops when the pod has no room left or after
    :data:`MAX_ADMISSION_WALK` Runs. Under the built-in filters, a Run without required
    terms or a workspace is judged without cutting its snapshot (its targets and its
    workspace are all a filter would read of it besides the pod); the pod's slot is read
    alone (:func:`snapshot.pod_slot`).
    """
    admitted: list[RunKey] = []
    refused: list[RunKey] = []
    extra = dict(claimed)
    shortcut = proven_for(registry)
    base: PodSlot | None = None
    group = ("", "")
    for examined, key in enumerate(parked):
        if examined >= MAX_ADMISSION_WALK:
            break
        run = state.run(key)
        if run is None or not run.status.pending or not run.runtime:
            continue
        if base is None or group != (key.namespace, run.runtime):  # the pod as the Runs of its group see it
            found = pod_slot(state, ledger, key.namespace, run.runtime, pod)
            if found is None:
                continue  # not a pod of this Run's group (it was recreated for another runtime)
            group, base = (key.namespace, run.runtime), found
        slot = PodSlot(base.pod, plus_reserved(base.usage, extra)) if extra else base
        if not slot.pod.available(now, config.stale_after()) or not fits(slot.pod.capacity, slot.usage, _ONE_RUN):
            break  # no room left for anyone: decided before any Run's snapshot is cut
        if shortcut and not run.affinity.required and not run.affinity.anti_required and run.workspace is None:
            # Nothing the built-in filters read of a snapshot besides the pod, the clock and the
            # config depends on the rest of it for this Run: no targets, no workspace to cut.
            snapshot = Snapshot(key, run, (slot,), (), None, ledger.get(key.namespace, run.uid), now, config)
        else:
            snapshot = replace(take(state, ledger, key, now, config), pods=(slot,))
        filtered = run_filters(run, snapshot, registry)
        if is_successful(filtered) and filtered.unwrap().feasible:
            admitted.append(key)
            for name, amount in run.requests.items():
                extra[name] = extra.get(name, 0) + amount
        else:
            refused.append(key)
    return Admission(tuple(admitted), tuple(refused))
