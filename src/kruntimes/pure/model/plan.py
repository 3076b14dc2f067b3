"""What a cycle decides: one ``Plan`` per dequeued Run, or a ``CycleError``.

Each plan variant says what the effect layer does next:

- ``Bind``   reserve ``pod`` in the ledger (compare-and-swap), then write the
             ``Scheduled`` status; a reserve conflict requeues at once.
- ``Wait``   write the Pending status (only if it changed); park the Run until an
             event can help it, re-planned within ``parking.RECHECK_SECONDS``
             if none comes.
- ``Fail``   write the terminal ``Failed`` status; never requeue.
- ``Cancel`` write the terminal ``Cancelled`` status; never requeue.
- ``Delay``  write nothing; requeue after ``seconds`` (retry back-off, SPEC §3.6).
- ``Skip``   write nothing; ``why`` says which rule ended the cycle.
- ``CycleError`` (a ``Failure``) write nothing, reserve nothing; retry the key
             with per-key exponential back-off.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple, TypeAlias, TypeVar, cast, final

from kruntimes.pure.model import messages
from kruntimes.pure.persistent.lazy import LazyTuple

Rejections: TypeAlias = tuple[tuple[str, str, int], ...]
"""``(plugin, reason, count)`` sorted by plugin registration order, then reason."""


class PodScore(NamedTuple):
    """One feasible pod's normalized score per plugin (registration order) and weighted total.

    A ``NamedTuple`` (immutable, same fields and keyword constructor as before)
    because a cycle builds one per feasible pod: thousands per cycle at scale,
    and a tuple is cheaper to build than a frozen dataclass.
    """

    pod: str
    by_plugin: tuple[tuple[str, int], ...]
    total: int


_new_score: Final = cast(
    "Callable[[type[PodScore], tuple[str, tuple[tuple[str, int], ...], int]], PodScore]", tuple.__new__
)
"""``tuple.__new__(PodScore, (pod, by_plugin, total))``: a PodScore without a Python-level ``__new__`` frame."""
_TOTAL: Final = operator.itemgetter(2)
_POD: Final = operator.itemgetter(0)


@final
class ScoreTable:
    """Every feasible pod's scores, ranked only when someone asks.

    Picking the best pod needs the totals alone; the ranked ``PodScore`` rows are
    for the cycle log, ``explain`` and ``simulate``. Building them costs a tuple per
    pod and a sort (a large share of a cycle at scale), so the table keeps the
    columns and ranks them on first use (once: the result is kept). The value is
    immutable either way: the same inputs always give the same ranking.
    """

    __slots__ = ("_pods", "_plugins", "_columns", "_totals", "_ranked")

    def __init__(
        self,
        pods: Sequence[str],
        plugins: Sequence[str],
        columns: Sequence[Sequence[int]],
        totals: Sequence[int],
    ) -> None:
        """``pods`` in name order; ``columns[k][i]`` the normalized score of ``pods[i]`` by
        ``plugins[k]``; ``totals[i]`` its weighted sum."""
        self._pods = pods
        self._plugins = plugins
        self._columns = columns
        self._totals = totals
        self._ranked: tuple[PodScore, ...] | None = None

    def __len__(self) -> int:
        return len(self._pods)

    def ranked(self) -> tuple[PodScore, ...]:
        """Total descending, then pod name ascending (SPEC §5)."""
        ranked = self._ranked
        if ranked is None:
            names = self._plugins
            rows = list(zip(*self._columns)) if self._columns else [()] * len(self._pods)
            # many pods share a score row: build each distinct by_plugin tuple once
            labelled = {row: tuple(zip(names, row)) for row in set(rows)}
            scored = list(
                map(_new_score, itertools.repeat(PodScore), zip(self._pods, map(labelled.__getitem__, rows), self._totals))
            )
            scored.sort(key=_TOTAL, reverse=True)  # stable: equal totals stay in name order
            ranked = self._ranked = tuple(scored)
        return ranked


_T = TypeVar("_T")


@final
class Ranked(LazyTuple[_T]):
    """A read-only view of a :class:`ScoreTable` in ranking order; equal to the tuple it stands for."""

    __slots__ = ("_table", "_pick")

    def __init__(self, table: ScoreTable, pick: Callable[[tuple[PodScore, ...]], tuple[_T, ...]]) -> None:
        self._table = table
        self._pick = pick

    def _items(self) -> tuple[_T, ...]:
        return self._pick(self._table.ranked())

    def __len__(self) -> int:
        return len(self._table)


def _pods(ranked: tuple[PodScore, ...]) -> tuple[str, ...]:
    return tuple(map(_POD, ranked))


def _same(ranked: tuple[PodScore, ...]) -> tuple[PodScore, ...]:
    return ranked


def ranked_views(table: ScoreTable) -> tuple[Ranked[str], Ranked[PodScore]]:
    """``(ranking, scores)`` for a :class:`Bind`, both ranked on first use."""
    return Ranked(table, _pods), Ranked(table, _same)


@dataclass(frozen=True, slots=True)
class Bind:
    pod: str
    pod_uid: str
    ranking: Sequence[str]
    """Feasible pods, best first (total descending, then name ascending); a tuple, or a
    :class:`Ranked` view equal to it (the planner ranks only when this is read)."""
    scores: Sequence[PodScore]
    """In ranking order (a tuple or an equal :class:`Ranked` view)."""
    rejections: Rejections


@dataclass(frozen=True, slots=True)
class Wait:
    message: str
    rejections: Rejections
    reason: str = "Unschedulable"


@dataclass(frozen=True, slots=True)
class Fail:
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Cancel:
    reason: str = messages.REASON_CANCELLED
    message: str = messages.CANCELLED_MESSAGE


@dataclass(frozen=True, slots=True)
class Delay:
    seconds: float


SkipWhy: TypeAlias = Literal[
    "not found",
    "not pending",
    "no runtime",
    "awaiting bind observation",
]


@dataclass(frozen=True, slots=True)
class Skip:
    why: SkipWhy


Plan: TypeAlias = Bind | Wait | Fail | Cancel | Delay | Skip

FailReason: TypeAlias = Literal["InvalidResources", "InvalidAffinity", "InvalidSpec"]

CycleErrorReason: TypeAlias = Literal["ScoreError", "PluginError"]


@dataclass(frozen=True, slots=True)
class CycleError:
    """A cycle that could not decide (a plugin misbehaved); retried with back-off."""

    reason: CycleErrorReason
    message: str

    def __str__(self) -> str:
        return self.message
