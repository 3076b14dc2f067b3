"""``LeastLoaded``: prefer the pod least loaded after placing the Run (SPEC §5).

For each resource the pod advertises with capacity > 0: projected = usage +
request; skipped when ≤ 0; ratio = projected / capacity as an exact rational.
Key = (max ratio, sum of ratios), lower is better. The raw score of a pod is
the first index of its key's group in the stable sort of all keys; normalized,
index ``s`` of ``n`` pods scores ``(n − 1 − s) × 100 // (n − 1)`` and a lone
candidate scores 100. So n=3 distinct → 100, 50, 0; [x, x, y] → 100, 100, 0;
[x, y, y] → 100, 50, 50; n=4 → 100, 66, 33, 0. This is a purely computational
module with no side effects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import lcm
from typing import Any, ClassVar, Final, TypeAlias, final

from returns.result import Result, Success

from kruntimes.pure.framework.interface import PodScorer, ScorePlugin, ScoresUnits
from kruntimes.pure.model.objects import RUNS_RESOURCE, PodSlot, Resources, Run, Snapshot
from kruntimes.pure.model.plan import CycleError
from kruntimes.pure.model.quantity import Amount


LoadKey: TypeAlias = tuple[Fraction, Fraction]


def load_key(capacity: Resources, usage: Resources, request: Resources) -> LoadKey:
    """(max ratio, sum of ratios) of projected usage to capacity; lower is less loaded."""
    top = total = Fraction(0)
    for resource, limit in capacity.items():
        if limit <= 0:
            continue
        projected = usage.get(resource, 0) + request.get(resource, 0)
        if projected <= 0:
            continue
        ratio = Fraction(projected) / limit
        total += ratio
        if ratio > top:
            top = ratio
    return (top, total)


def least_loaded_keys(slots: Iterable[PodSlot], request: Resources) -> tuple[LoadKey, ...]:
    """The key of each slot, in order."""
    return tuple(load_key(slot.pod.capacity, slot.usage, request) for slot in slots)


_MAX_SCALE_BITS: Final = 256
"""Beyond this the common denominator costs more than rationals do."""


def scaled_keys(slots: tuple[PodSlot, ...], request: Resources) -> tuple[tuple[Amount, Amount], ...]:
    """The keys of :func:`least_loaded_keys` multiplied by one positive constant.

    Every ratio is scaled by ``L``, the least common multiple of the integer
    capacities, so the common case compares small integers instead of
    ``Fraction`` pairs; order and equality are exactly those of the rational
    keys (a positive common factor preserves both).
    """
    scale = 1
    for slot in slots:
        for limit in slot.pod.capacity.values():
            if isinstance(limit, int) and limit > 0 and scale % limit:
                scale = lcm(scale, limit)
        if scale.bit_length() > _MAX_SCALE_BITS:
            scale = 1
            break
    # Per distinct capacity value: the integer factor scale // limit, or None (rational path).
    factors: dict[Amount, int | None] = {}
    keys: list[tuple[Amount, Amount]] = []
    requested = request.get
    for slot in slots:
        used = slot.usage.get
        top: Amount = 0
        total: Amount = 0
        for resource, limit in slot.pod.capacity.items():
            projected = used(resource, 0) + requested(resource, 0)
            if projected <= 0 or limit <= 0:
                continue
            if limit in factors:
                factor = factors[limit]
            else:
                factor = scale // limit if isinstance(limit, int) and scale % limit == 0 else None
                factors[limit] = factor
            ratio: Amount = projected * factor if factor is not None else Fraction(projected * scale) / limit
            total += ratio
            if ratio > top:
                top = ratio
        keys.append((top, total))
    return tuple(keys)


def runs_only_keys(slots: tuple[PodSlot, ...], request: Resources) -> list[Amount] | None:
    """The fast path of :func:`scaled_keys`, or ``None`` when it does not apply.

    When every pod's only capacity entry > 0 is an integer ``runs`` (the default
    capacity and the common case) and the request asks for ``runs`` > 0, a key
    ``(max ratio, sum of ratios)`` is ``(x, x)`` with ``x = (used + requested) / c``:
    ordering and equality of keys are those of ``x``, and ``x × L`` (``L`` the lcm of
    the capacities) is an integer. So one integer per pod, computed in one pass.
    """
    requested = request.get(RUNS_RESOURCE, 0)
    if requested <= 0:
        return None
    capacities = {slot.pod.only_runs_capacity for slot in slots}
    if 0 in capacities:
        return None
    scale = lcm(*capacities)
    if scale.bit_length() > _MAX_SCALE_BITS:
        return None
    factors = {c: scale // c for c in capacities}
    used = [slot.runs_used for slot in slots]
    if used and min(used) < 0:
        return None  # projected could be <= 0: the general path skips such ratios
    return [(u + requested) * factors[slot.pod.only_runs_capacity] for u, slot in zip(used, slots)]


def fast_group_starts(keys: Sequence[object]) -> list[int]:
    """:func:`group_starts` for keys that are single comparable values, at C speed."""
    ordered = sorted(keys)  # type: ignore[type-var]
    # Walking the sorted keys backwards, the last write for a key is its first index.
    first = dict(zip(reversed(ordered), range(len(ordered) - 1, -1, -1)))
    return list(map(first.__getitem__, keys))


def group_starts(keys: Sequence[tuple[Amount, Amount]]) -> tuple[int, ...]:
    """For each key (in order), the first index of its group of equal keys in the stable sort."""
    order = sorted(range(len(keys)), key=keys.__getitem__)
    starts = [0] * len(keys)
    start = 0
    for position, index in enumerate(order):
        if position and keys[index] != keys[order[position - 1]]:
            start = position
        starts[index] = start
    return tuple(starts)


def rank_scores(starts: tuple[int, ...]) -> tuple[int, ...]:
    """Group start index ``s`` of ``n`` → ``(n − 1 − s) × 100 // (n − 1)``; one candidate → 100."""
    count = len(starts)
    if count == 1:
        return (100,)
    last = count - 1
    # Few distinct starts (pods share loads): compute each score once.
    score = {s: (last - s) * 100 // last for s in set(starts)}
    return tuple(map(score.__getitem__, starts))


def unit_rank_scores(keys: Sequence[Any], sizes: Sequence[int], n: int) -> list[int]:
    """``LeastLoaded``'s normalized score per unit: ``s`` = the pods of units with a
    strictly lower key; one pod → 100."""
    if n == 1:
        return [100]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    below = [0] * len(keys)
    passed = 0
    position = 0
    while position < len(order):
        end = position
        group = 0
        while end < len(order) and keys[order[end]] == keys[order[position]]:
            below[order[end]] = passed
            group += sizes[order[end]]
            end += 1
        passed += group
        position = end
    last = n - 1
    return [(last - s) * 100 // last for s in below]


@final
@dataclass(frozen=True, slots=True)
class LeastLoaded:
    name: ClassVar[str] = "LeastLoaded"
    fast_path: ClassVar[bool] = True
    """The key reads capacity, usage and request only; the rank is scored per unit (``score_units``)."""

    def score_units(self, run: Run, slots: tuple[PodSlot, ...], sizes: Sequence[int]) -> Sequence[int]:
        fast = runs_only_keys(slots, run.requests)
        keys: Sequence[object] = fast if fast is not None else scaled_keys(slots, run.requests)
        return unit_rank_scores(keys, sizes, sum(sizes))

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        request = run.requests

        def scorer(slots: tuple[PodSlot, ...]) -> tuple[int, ...]:
            fast = runs_only_keys(slots, request)
            if fast is not None:
                return tuple(fast_group_starts(fast))
            return group_starts(scaled_keys(slots, request))

        return Success(scorer)

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        return rank_scores(raw)


_: ScorePlugin = LeastLoaded()
_u: ScoresUnits = LeastLoaded()
