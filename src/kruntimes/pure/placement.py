"""Placement without a scan: the plan of SPEC §4–§5, found from the state's load index.

``plan_cycle`` filters and scores every candidate pod. Most pods of a runtime,
though, are alike for a given Run: a pod that hosts no target of any of the
Run's terms, is not the Run's workspace pod, has a fresh heartbeat and holds no
reservation gets the same verdict from every filter and the same raw scores as
any other such pod with the same capacity, usage and static availability (its
*load class*, ``PodSlot.load_class``):

- ``RuntimePodAvailability`` reads the static availability, the heartbeat
  (fresh: the same answer) and ``fits(capacity, usage, request)``;
- ``RunAffinity`` reads only whether the pod hosts a matching target of each
  required term (it hosts none) and whether a term is seedable (one answer per
  cycle);
- ``WorkspacePlacement`` reads only whether the pod is the workspace's pod;
- ``PreferredRunAffinity``'s raw score reads only which terms' targets the pod
  hosts (none: the base score, Σ anti-affinity weights);
- ``LeastLoaded``'s key reads capacity, usage and request.

So the candidates fall into *units*: each load class (its pods minus the
singled-out ones, counted), the reserved pods grouped by the class of their
slot with the reservations added, and each singled-out pod alone (stale
heartbeat, hosting a target of a term, the workspace pod). The real prepared
filters judge one representative slot per unit and its count is added to the
rejections; the scores follow from the units too: ``PreferredRunAffinity``
normalises by the maximum raw score (a unit's raw is its pods'), and
``LeastLoaded``'s score of a pod is ``(n − 1 − s) × 100 // (n − 1)`` with ``n``
the feasible pods and ``s`` those with a strictly lower key — sums of unit
counts. Within a unit every pod has the same total, so the unit's best pod is
its first name; the winner is the best total, then the lowest name, over the
units: exactly the pod, scores and tie break of the scan.

Used only for profiles whose every plugin declares that this argument covers
it (``fast_path``: the five built-in ones do, in any subset, order and
weights); a snapshot not cut by ``snapshot.take``, a naive clock, fewer than
:data:`MIN_PODS` pods, more than :data:`MAX_CLASSES` load classes, or more than
a quarter of the pods reserved or singled out go to the scan (there the units
are nearly the pods, and the scan's whole-list filters are cheaper). So does a
plugin that fails or breaks its contract (a failed prepare, an undeclared reason,
scores of the wrong number or outside 0..100): the scan meets the same fault and
fails the cycle as it always does. The Bind's ranking and scores are the scan's,
computed when read (cycle log, ``explain``, ``simulate``).

This is a purely computational module with no side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, NamedTuple, TypeVar, final

from returns.result import Result, Success

from kruntimes.pure.framework.batch import BatchFilter
from kruntimes.pure.framework.interface import MAX_SCORE, MIN_SCORE, ScoresUnits
from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.framework.runtime import prepare_filters, rejection_table, run_filters, run_scores, wait_message
from kruntimes.pure.model.objects import NEVER_US, LoadClass, PodSlot, Run, Snapshot, epoch_us
from kruntimes.pure.model.plan import Bind, CycleError, Plan, PodScore, ScoreTable, Wait
from kruntimes.pure.persistent.lazy import LazyTuple
from kruntimes.pure.snapshot import CandidateSlots


__all__ = ["Placed", "fast_plan", "place", "proven_for"]

MAX_CLASSES: Final = 64
"""Beyond this many load classes the units are no longer few: scan."""
SINGLED_OUT_SHARE: Final = 4
"""Scan when more than 1/4 of the pods must be judged one by one."""
MIN_PODS: Final = 128
"""Below this many pods the scan's whole-list filters cost no more than the units
(benchmarks/planning_l0.py: equal at 100 pods, the scan faster at 2)."""


class _Unit(NamedTuple):
    slot: PodSlot
    """The representative: the unit's first pod by name."""
    size: int


def proven_for(registry: Registry) -> bool:
    """Whether every plugin of the profile declares that the argument above covers it
    (``fast_path``)."""
    return all(e.plugin.fast_path for e in registry.filters) and all(e.plugin.fast_path for e in registry.scores)


class Placed(NamedTuple):
    """What the index decided: the plan, and for a ``Bind`` the chosen pod's score row."""

    plan: Plan
    chosen: PodScore | None


def fast_plan(run: Run, snapshot: Snapshot, registry: Registry) -> Result[Plan, CycleError] | None:
    """The plan ``plan_cycle`` would make after ``precheck``, or ``None`` when only the
    scan can say (see the module docstring)."""
    placed = place(run, snapshot, registry)
    return None if placed is None else Success(placed.plan)


def place(
    run: Run,
    snapshot: Snapshot,
    registry: Registry,
    *,
    max_classes: int = MAX_CLASSES,
    singled_out_share: int = SINGLED_OUT_SHARE,
    min_pods: int = MIN_PODS,
) -> Placed | None:
    """:func:`fast_plan` with the chosen pod's scores; the limits are the points at
    which the scan is cheaper (a share of 0: never for singled-out pods)."""
    pods = snapshot.pods
    if not isinstance(pods, CandidateSlots) or not proven_for(registry):
        return None
    index = pods.load_index
    count = index.count
    moved = pods.moved
    if count < min_pods or len(moved) * singled_out_share > count:
        return None
    hosts = snapshot.hosts
    if run.affinity.all_terms():
        if hosts is None or any(len(on) * singled_out_share > count for on in hosts.values()):
            return None
    classes = index.classes
    if len(classes) > max_classes:
        return None
    oldest = snapshot.now - snapshot.config.stale_after()
    if oldest.tzinfo is None:
        return None
    oldest_us = epoch_us(oldest)
    # The pods judged one by one, with the slot the scan would see.
    single: dict[str, PodSlot] = {}
    probe_mins = index.probe_mins
    for chunk, low in zip(index.chunks, probe_mins) if min(probe_mins) < oldest_us else ():
        if low < oldest_us:
            for slot in chunk:
                probe = slot.pod.available_probe_us
                if probe is None or (probe != NEVER_US and probe < oldest_us):
                    single[slot.pod.name] = slot
    if hosts:  # the pods hosting a target, per selector of the Run's terms (none without terms)
        for on in hosts.values():
            for name in on:
                found = index.slot(name)
                if found is not None:
                    single[name] = found
    workspace = snapshot.workspace
    if workspace is not None and workspace.bound_pod:
        found = index.slot(workspace.bound_pod)
        if found is not None:
            single[workspace.bound_pod] = found
    if len(single) * singled_out_share > count:
        return None

    taken: dict[LoadClass, int] = {}
    for name, state_slot in single.items():
        key = state_slot.load_class
        taken[key] = taken.get(key, 0) + 1
    units: list[_Unit] = []
    shifted: dict[LoadClass, list[PodSlot]] = {}
    for name, (state_slot, slot) in moved.items():
        if name in single:
            single[name] = slot
            continue
        old_key, new_key = state_slot.load_class, slot.load_class
        taken[old_key] = taken.get(old_key, 0) + 1
        held = shifted.get(new_key)
        if held is None:
            shifted[new_key] = [slot]
        else:
            held.append(slot)
    for name, slot in single.items():
        units.append(_Unit(slot, 1))
    for key, names in classes.items():
        size = len(names) - taken.get(key, 0)
        if size <= 0:
            continue
        first = names[0]
        if first in single or first in moved:
            first = next(n for n in names if n not in single and n not in moved)
        representative = index.slot(first)
        assert representative is not None  # the index names only its own pods
        units.append(_Unit(representative, size))
    for held in shifted.values():
        units.append(_Unit(min(held, key=_slot_name), len(held)))
    return _decide(run, snapshot, registry, units)


def _slot_name(slot: PodSlot) -> str:
    return slot.pod.name


def _decide(run: Run, snapshot: Snapshot, registry: Registry, units: list[_Unit]) -> Placed | None:
    """The plan from the units, or ``None`` when a plugin fails or breaks its contract: the
    scan then meets the same fault and reports it as it always does (naming the pod it
    sees first, which need not be a unit's representative)."""
    prepared = prepare_filters(run, snapshot, registry)
    if not isinstance(prepared, Success):
        return None
    chain = prepared.unwrap()
    counts: dict[tuple[int, str], int] = {}
    feasible: list[_Unit] = []
    # Pods judged alone go through the filters as the scan sends its pods, a whole list at a
    # time (a filter claiming ``fast_path`` prepares one: FilterPlugin.fast_path); a unit of
    # many, one representative call per filter.
    alone: Sequence[PodSlot] = [unit.slot for unit in units if unit.size == 1]
    for index, _, pod_filter in chain:
        if not alone:
            break
        assert isinstance(pod_filter, BatchFilter)  # what fast_path promises (FilterPlugin.fast_path)
        alone, rejected = pod_filter.select(alone)
        for reason, count in rejected.items():
            counts[(index, reason)] = count  # each filter once, before the units: a new key
    feasible.extend(_Unit(slot, 1) for slot in alone)
    for unit in units:
        if unit.size == 1:
            continue
        for index, _, pod_filter in chain:
            verdict = pod_filter(unit.slot)
            if verdict is not None:
                key = (index, verdict)
                counts[key] = counts.get(key, 0) + unit.size
                break
        else:
            feasible.append(unit)
    rejections: tuple[tuple[str, str, int], ...] = ()
    if counts:
        table = rejection_table(registry, counts)
        if not isinstance(table, Success):
            return None
        rejections = table.unwrap()
    if not feasible:
        return Placed(Wait(wait_message(run, registry, rejections), rejections), None)

    slots = tuple(unit.slot for unit in feasible)
    sizes = [unit.size for unit in feasible]
    n = sum(sizes)
    totals = [0] * len(slots)
    columns: list[Sequence[int]] = []
    for entry in registry.scores:
        plugin = entry.plugin
        scores: Sequence[int]
        if isinstance(plugin, ScoresUnits):
            scores = plugin.score_units(run, slots, sizes)
        else:
            prepared_score = plugin.prepare(run, snapshot)
            if not isinstance(prepared_score, Success):
                return None
            raw = prepared_score.unwrap()(slots)
            if len(raw) != len(slots):
                return None
            scores = plugin.normalize(raw)
        if len(scores) != len(slots) or min(scores) < MIN_SCORE or max(scores) > MAX_SCORE:
            return None
        columns.append(scores)
        weight = entry.weight
        totals = [total + value * weight for total, value in zip(totals, scores)]
    top = max(totals)
    at = min((i for i, total in enumerate(totals) if total == top), key=lambda i: slots[i].pod.name)
    best = slots[at].pod
    chosen = PodScore(best.name, tuple((e.name, column[at]) for e, column in zip(registry.scores, columns)), top)
    deferred = _Deferred(run, snapshot, registry)
    bind = Bind(
        pod=best.name,
        pod_uid=best.uid,
        ranking=_Later(deferred, n, _names),
        scores=_Later(deferred, n, _rows),
        rejections=rejections,
    )
    return Placed(bind, chosen)


@final
class _Deferred:
    """The scan's score table for a plan the index made, computed on first read."""

    __slots__ = ("_run", "_snapshot", "_registry", "_table")

    def __init__(self, run: Run, snapshot: Snapshot, registry: Registry) -> None:
        self._run, self._snapshot, self._registry = run, snapshot, registry
        self._table: ScoreTable | None = None

    def ranked(self) -> tuple[PodScore, ...]:
        table = self._table
        if table is None:
            filtered = run_filters(self._run, self._snapshot, self._registry).unwrap()
            scored = run_scores(self._run, self._snapshot, self._registry, filtered.feasible).unwrap()
            table = self._table = scored.table
        return table.ranked()


_T = TypeVar("_T")


@final
class _Later(LazyTuple[_T]):
    """A view of the scan's ranking, equal to the tuple a scan's ``Bind`` holds."""

    __slots__ = ("_deferred", "_count", "_pick")

    def __init__(self, deferred: _Deferred, count: int, pick: Callable[[tuple[PodScore, ...]], tuple[_T, ...]]) -> None:
        self._deferred, self._count, self._pick = deferred, count, pick

    def _items(self) -> tuple[_T, ...]:
        return self._pick(self._deferred.ranked())

    def __len__(self) -> int:
        return self._count


def _names(ranked: tuple[PodScore, ...]) -> tuple[str, ...]:
    return tuple(row.pod for row in ranked)


def _rows(ranked: tuple[PodScore, ...]) -> tuple[PodScore, ...]:
    return ranked
