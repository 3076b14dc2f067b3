"""``BatchFilter``: a prepared pod filter that can also judge a whole list of slots at once.

A ``PodFilter`` is a function of one slot, and stays one: anything that calls
a prepared filter per pod (``explain``, tests, other frameworks) keeps working.
A built-in filter additionally offers ``select(slots)``, which answers for all
slots in one call — a list comprehension over precomputed fields instead of one
Python call per pod — and ``plan_cycle`` uses it when present. ``select`` must
agree with the per-slot function exactly: the same slots pass, in order, and
each rejected slot is counted under the reason the function would return.
This is a purely computational module with no side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias, final

from kruntimes.pure.model.objects import PodSlot

Selection: TypeAlias = tuple[list[PodSlot], dict[str, int]]
"""(the slots that pass, in order; rejected slots counted by reason)."""


@final
class BatchFilter:
    """A ``PodFilter`` (call it with one slot) with a whole-list ``select``."""

    __slots__ = ("_one", "_many")

    def __init__(self, one: Callable[[PodSlot], str | None], many: Callable[[Sequence[PodSlot]], Selection]) -> None:
        self._one = one
        self._many = many

    def __call__(self, slot: PodSlot) -> str | None:
        return self._one(slot)

    def select(self, slots: Sequence[PodSlot]) -> Selection:
        return self._many(slots)


def rejected_as(reason: str, before: int, kept: list[PodSlot]) -> Selection:
    """A selection whose every rejection has the same ``reason``."""
    rejected = before - len(kept)
    return kept, ({reason: rejected} if rejected else {})
