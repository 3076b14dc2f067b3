"""One cycle's inputs, cut from the cluster state and the ledger at one instant.

Rule: a snapshot reads only what the Run's decision can depend on — the
Run's own (namespace, runtime) pods, the targets that match one of its own
affinity terms, its workspace and its namespace's reservations — so its cost
does not grow with unrelated Runs, pods or namespaces (SPEC §3.8). Everything is sorted by name so a logged snapshot
replays identically whatever the hash seed. This is a purely computational
module: ``now`` is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Final, final

from kruntimes.pure.persistent.lazy import LazyTuple
from kruntimes.pure.state.cluster import ClusterState, OnPods, PodIndex
from kruntimes.pure.ledger import Ledger, NamespaceBook, PodReservations
from kruntimes.pure.model.objects import (
    AffinityTerm,
    LabelSelector,
    PodSlot,
    Reservation,
    Run,
    RunKey,
    SchedulerConfig,
    Snapshot,
    Target,
)
from kruntimes.pure.model.objects import label_matcher
from kruntimes.pure.model.resources import plus_reserved

_TARGET_ORDER: Final = attrgetter("pod", "run_uid", "assumed")
_POD_UID_ORDER: Final = attrgetter("pod", "run_uid")
_NAME: Final = attrgetter("name")
_FIRST: Final = itemgetter(0)


def take(
    state: ClusterState,
    ledger: Ledger,
    key: RunKey,
    now: datetime,
    config: SchedulerConfig,
    *,
    every_target: bool = False,
) -> Snapshot:
    """The snapshot for one dequeued Run key.

    Targets: every affinity term is decided by *which pods* host a matching
    target and whether any target matches at all (SPEC §4–§5: existence, never
    counts), so per distinct selector of the Run's terms the snapshot keeps one
    matching active Run per pod (the lowest uid), plus the matching
    reservations, and hands the plugins the hosting pods per selector
    (``Snapshot.hosts``). The state's label index groups targets by pod, so a
    term matching thousands of Runs costs O(pods hosting one) here and in the
    plugins, and the targets themselves are gathered and sorted only when read
    (a cycle log, ``explain``). ``every_target=True`` keeps every matching
    target (``explain`` counts them per pod); the plan is the same.

    ``ledger`` is read as given: the step (``kruntimes.pure.step.plan``) syncs
    the namespace first (SPEC §6), so that overtaken reservations neither hold
    capacity nor count as targets. A Run that is absent, not Pending or has no
    runtime gets no pods: the cycle ends before it would look at them.

    The candidate slots come ready-made from the state (sorted by name, actual
    usage included); only the pods holding reservations get another slot, which
    the ledger usually has ready too (see :func:`_pod_slots`).
    """
    run = state.run(key)
    reservation = None if run is None else ledger.get(key.namespace, run.uid)
    if run is None or not run.status.pending or not run.runtime:
        return Snapshot(key, run, (), (), None, reservation, now, config)
    pods = _pod_slots(state, ledger.book(key.namespace), key.namespace, run.runtime)
    workspace = None if run.workspace is None else state.workspace(key.namespace, run.workspace.name)
    targets, hosts = _targets(state, ledger, run, every_target)
    return Snapshot(
        key=key,
        run=run,
        pods=pods,
        targets=targets,
        workspace=workspace,
        reservation=reservation,
        now=now,
        config=config,
        hosts=hosts,
    )


@final
class CandidateSlots(LazyTuple[PodSlot]):
    """A snapshot's candidate slots (sorted by name, reservations added), built as one
    tuple only when read (the scan, a cycle log, ``explain``) and equal to it; what
    placement without a scan (``kruntimes.pure.placement``) reads instead: the state's
    load index of the group, and the slots the ledger's reservations change, by pod
    name, as ``(state slot, slot here)``. A snapshot built any other way holds a plain
    tuple, and the planner scans it."""

    __slots__ = ("load_index", "moved", "_positions", "_built")

    def __init__(
        self,
        load_index: PodIndex,
        moved: dict[str, tuple[PodSlot, PodSlot]],
        positions: Sequence[int] = (),
        built: tuple[PodSlot, ...] | None = None,
    ) -> None:
        self.load_index = load_index
        self.moved = moved
        """Pod name -> (its slot in the state, its slot here), for the pods reservations change."""
        self._positions = positions
        """Where each of ``moved`` sits in the tuple, in ``moved``'s order (unless ``built``)."""
        self._built = built

    def _items(self) -> tuple[PodSlot, ...]:
        built = self._built
        if built is None:
            slots = self.load_index.slots()
            moved = self.moved
            if moved:
                out = list(slots)
                for at, (_, slot) in zip(self._positions, moved.values()):
                    out[at] = slot
                slots = tuple(out)
            built = self._built = slots
        return built

    def __len__(self) -> int:
        return self.load_index.count


def pod_slot(state: ClusterState, ledger: Ledger, namespace: str, runtime: str, name: str) -> PodSlot | None:
    """Pod ``name``'s slot as :func:`take` would give it to a Run of ``runtime`` (actual usage
    plus the namespace's reservations on it); ``None`` when it is not a pod of that group.
    Two bisections and the book's entry for that pod: no other pod is looked at."""
    index = state.load_index(namespace, runtime)
    slot = None if index is None else index.slot(name)
    if slot is None:
        return None
    book = ledger.book(namespace)
    on_pod = None if book is None else book.pods.get(name)
    reserved = None if on_pod is None or not on_pod.total else _reserved_slot(slot, on_pod)
    return slot if reserved is None else reserved


def _reserved_slot(slot: PodSlot, on_pod: PodReservations) -> PodSlot | None:
    """The slot of a pod holding reservations: the book's ready one while it was derived from
    this very pod and usage, else actual usage plus what the reservations hold on this very
    pod (those made for a former pod of the name hold nothing); ``None`` when they hold nothing."""
    if on_pod.slot is not None and slot.pod is on_pod.pod and slot.usage is on_pod.usage:
        return on_pod.slot
    held = on_pod.total_for(slot.pod.uid)
    return PodSlot(slot.pod, plus_reserved(slot.usage, held)) if held else None


def _pod_slots(
    state: ClusterState, book: NamespaceBook | None, namespace: str, runtime: str
) -> CandidateSlots | tuple[PodSlot, ...]:
    """``state.pod_slots(namespace, runtime, reserved totals)``, from the ledger's book,
    as a :class:`CandidateSlots` (``()`` without pods).

    A pod holding reservations gets ``PodSlot(pod, actual usage + reserved total)``;
    the book keeps that slot ready (``PodReservations.slot``), used as is while the
    state's slot still holds the very pod and usage objects it was derived from —
    else it is rebuilt here. Those pods are found by two bisections each in the state's
    chunked names, and the other slots are the state's, gathered only when read; or,
    with reservations on an eighth of the pods or more, by one name index over the
    group, and the tuple is built at once.
    """
    index = state.load_index(namespace, runtime)
    if index is None:
        return ()
    if book is None:
        return CandidateSlots(index, {})
    moved: dict[str, tuple[PodSlot, PodSlot]] = {}
    if index.count < len(book.pods) * 8:
        # Reservations on an eighth of the pods or more (a small group, or a busy one: the
        # scan will read the tuple): one name index, a step a pod in C, and the tuple now.
        where = index.positions_by_name()
        slots = index.slots()
        out = list(slots)
        for name, on_pod in book.pods.items():
            at = where.get(name)
            if at is None or not on_pod.total:
                continue  # a pod of another runtime, or gone; or nothing reserved on it
            slot = slots[at]
            if on_pod.slot is not None and slot.pod is on_pod.pod and slot.usage is on_pod.usage:
                out[at] = reserved = on_pod.slot  # (:func:`_reserved_slot`, inline: a step a pod)
            else:
                held = on_pod.total_for(slot.pod.uid)
                if not held:
                    continue  # made for a former pod of the name: nothing held on this one
                out[at] = reserved = PodSlot(slot.pod, plus_reserved(slot.usage, held))
            moved[name] = (slot, reserved)
        return CandidateSlots(index, moved, built=tuple(out))
    positions: list[int] = []
    loaded = [(name, on_pod) for name, on_pod in book.pods.items() if on_pod.total]
    for (name, on_pod), found in zip(loaded, index.located([name for name, _ in loaded])):
        if found is None:
            continue  # a pod of another runtime, or gone
        at, slot = found
        replaced = _reserved_slot(slot, on_pod)
        if replaced is None:
            continue  # made for a former pod of the name
        moved[name] = (slot, replaced)
        positions.append(at)
    return CandidateSlots(index, moved, positions)


def _targets(
    state: ClusterState, ledger: Ledger, run: Run, every_target: bool
) -> tuple[Sequence[Target], dict[LabelSelector, frozenset[str]]]:
    """Active Runs and reservations of the namespace matching any of the Run's terms
    (of the active ones, one per pod and selector unless ``every_target``; see
    :func:`take`), and per selector the pods hosting one.

    One entry per run uid. The ledger is synced (:func:`take`), so no reservation's
    Run is observed as active, hence none is also an active target. The Run's own
    reservation is never a target (it would seed its own affinity). The hosting
    pods are the keys of the state's per-pod index; the targets themselves are
    gathered and ordered only when read.
    """
    terms: tuple[AffinityTerm, ...] = run.affinity.all_terms()
    if not terms:
        return (), {}
    namespace = run.namespace
    selectors = tuple(dict.fromkeys(term.selector for term in terms))
    found = [state.matches_by_pod(namespace, selector, first_only=not every_target) for selector in selectors]
    others = [r for r in ledger.in_namespace(namespace) if r.run_uid != run.uid and _holds_its_pod(state, r)]
    hosts: dict[LabelSelector, frozenset[str]] = {}
    assumed: dict[str, Reservation] = {}
    for selector, on_pods in zip(selectors, found):
        pods = frozenset(on_pods.keys())
        if others:
            matches = label_matcher(selector)
            hits = [r for r in others if matches(r.labels)]
            assumed.update((r.run_uid, r) for r in hits)
            extra = [r.pod for r in hits if r.pod not in pods]
            if extra:
                pods = pods.union(extra)
        hosts[selector] = pods
    return OrderedTargets(tuple(found), tuple(assumed.values()), every_target), hosts


def _holds_its_pod(state: ClusterState, reservation: Reservation) -> bool:
    """A reservation is a target only on the pod it was made for (SPEC §1, as a bound Run):
    made by name alone, or for the uid the pod of that name has now."""
    if not reservation.pod_uid:
        return True
    pod = state.pod(reservation.namespace, reservation.pod)
    return pod is not None and pod.uid == reservation.pod_uid


@final
class OrderedTargets(LazyTuple[Target]):
    """A snapshot's targets, gathered and sorted by (pod, run uid, assumed) on first
    read (a cycle log, ``explain``, a plugin that walks them); equal to that tuple.

    Holds the state's per-pod matches of each selector (the lowest-uid target of
    each pod, or all of them with ``every_target``) and the assumed targets.
    """

    __slots__ = ("_found", "_assumed", "_every", "_ordered")

    def __init__(self, found: tuple[OnPods, ...], assumed: tuple[Reservation, ...], every: bool) -> None:
        self._found = found
        self._assumed = assumed
        self._every = every
        self._ordered: tuple[Target, ...] | None = None

    def _items(self) -> tuple[Target, ...]:
        items = self._ordered
        if items is None:
            items = self._ordered = _gather(self._found, self._assumed, self._every)
        return items


def _gather(found: tuple[OnPods, ...], assumed: tuple[Reservation, ...], every: bool) -> tuple[Target, ...]:
    groups = [
        chain.from_iterable(on_pods.values()) if every else map(_FIRST, on_pods.values()) for on_pods in found
    ]
    # The same active Run is the same Target object in every index group, so
    # keying by identity first and by uid second loses nothing unless two
    # distinct targets share a uid; then keep the first in the documented order.
    distinct = {id(t): t for t in chain.from_iterable(groups)}
    by_uid = {t.run_uid: t for t in distinct.values()}
    if len(by_uid) != len(distinct):
        by_uid = {}
        for target in sorted(distinct.values(), key=_POD_UID_ORDER):
            by_uid.setdefault(target.run_uid, target)
    for reservation in assumed:
        if reservation.run_uid not in by_uid:
            by_uid[reservation.run_uid] = Target(
                pod=reservation.pod, labels=reservation.labels, run_uid=reservation.run_uid, assumed=True
            )
    return tuple(sorted(by_uid.values(), key=_TARGET_ORDER))
