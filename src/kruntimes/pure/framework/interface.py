"""The extension points: one small protocol each, and the prepared values they return.

Shaped after the Kubernetes scheduler framework. A plugin is an immutable value
that implements one protocol per extension point it takes part in:

- **PreFilter + Filter** — ``FilterPlugin.prepare(run, snapshot)``, once per
  cycle: compile and resolve what the plugin needs (selector pod sets, the
  workspace constraint) and return the prepared filter, a ``PodFilter``
  ``(PodSlot) -> reason | None``. Returning ``None`` instead of a filter means
  "this plugin passes every pod this cycle" (Kubernetes' PreFilter ``Skip``).
- **Pending message** — ``FilterPlugin.pending_message(reasons, run)``, once per
  cycle that ends in ``Wait``, for each filter that rejected at least one pod:
  the plugin may claim the Run's Pending message with a ``PendingMessage``
  (text and precedence rank). The highest rank wins (the first registered
  among equal ranks); with no claim the message is the generic
  ``waiting for available runtime pods for runtime "<rt>"`` (SPEC §7).
- **Explain** — ``FilterPlugin.explain(reason, slot, run, snapshot)``: what
  ``explain`` prints beside a pod the plugin rejected, for an operator.
- **Parking** — ``FilterPlugin.park_kinds``: for each reason, what kind of change
  could let a Run it held back be placed (``ParkKind``); the queue parks a waiting
  Run by it (SPEC §8).
- **Placement fast path** — ``fast_path`` (filters and scores): whether
  ``placement`` may judge the plugin on one representative pod per load class
  (see ``kruntimes.pure.placement``). A plugin that does not claim it turns the
  fast path off for its profile: the scan decides, as it always can.
- **PreScore + Score + NormalizeScore** — ``ScorePlugin.prepare(run, snapshot)``
  returns a ``PodScorer`` ``(feasible slots) -> raw scores``;
  ``ScorePlugin.normalize(raw)`` maps them into 0..100.

All prepared state lives in the closures a cycle creates and drops: nothing is
shared between cycles, so plugins need no locks and cycles replay exactly.

What the runtime does with each answer (the "status codes"):

- a filter reason (``str``): the pod is infeasible for this Run *now*; it is
  counted once for (plugin, reason) and the cycle may end in ``Wait``. The
  reason must be one of the plugin's declared ``reasons`` (a closed set: it
  becomes a metric label), else the cycle fails with ``PluginError``.
- ``Failure(CycleError)`` from any ``prepare``, a scorer returning the wrong
  number of scores, or a normalized score outside 0..100 (``ScoreError``): the
  cycle decides nothing — no reservation, no status write — and the key is
  retried with per-key exponential back-off (the error is transient or a bug,
  never a property of the Run).

This is a purely computational module with no side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol, TypeAlias, final, runtime_checkable

from returns.result import Result

from kruntimes.pure.model.objects import PodSlot, Run, Snapshot
from kruntimes.pure.model.plan import CycleError

__all__ = [
    "MAX_SCORE",
    "MIN_SCORE",
    "FilterPlugin",
    "ParkKind",
    "PendingMessage",
    "PodFilter",
    "PodScorer",
    "ScorePlugin",
    "ScoresUnits",
    "keep_scores",
    "normalize_to_max",
]

MIN_SCORE: Final = 0
MAX_SCORE: Final = 100

PodFilter: TypeAlias = Callable[[PodSlot], "str | None"]
"""A prepared Filter: ``None`` when the pod passes, else the rejection reason."""

PodScorer: TypeAlias = Callable[[tuple[PodSlot, ...]], tuple[int, ...]]
"""A prepared Score: one raw score per feasible slot, in the order given."""

ParkKind: TypeAlias = Literal["capacity", "constraints"]
"""What kind of change could let a Run a filter reason held back be placed: ``capacity``,
room on a pod it could use (a release, a pod that appears or grows); ``constraints``, a
change to what the filter reads besides the pod's room (the labels of the Runs its terms
select, its workspace). The queue parks a waiting Run by it (``queueing.park_reason``)."""


@final
@dataclass(frozen=True, slots=True)
class PendingMessage:
    """A filter plugin's claim on the Pending message of a cycle that ends in ``Wait``."""

    rank: int
    """Precedence among the claims of one cycle: the highest wins. The built-in
    plugins claim 300 (required affinity), 200 (required anti-affinity) and 100
    (workspace placement); rank a new claim against those."""
    text: str
    """The whole message. It becomes ``status.message`` and an Event, so it may name
    only what the Run itself names (its runtime, its workspace): never a pod, a Run
    or selector text, and never a value that varies with the pods rejected."""


class FilterPlugin(Protocol):
    """PreFilter + Filter, and the words for what they decide.

    Implementations are immutable values (``@final`` frozen dataclasses). A plugin
    declares its whole vocabulary here, in one place: the reasons it may return,
    the Pending message they call for, and the detail ``explain`` shows.
    """

    @property
    def name(self) -> str:
        """The registry name; the ``plugin`` metric label."""
        ...

    @property
    def reasons(self) -> frozenset[str]:
        """Every reason the filter may return: a closed set (the ``reason`` metric label)."""
        ...

    @property
    def park_kinds(self) -> Mapping[str, ParkKind]:
        """For each of ``reasons``, what kind of change could let a Run it held back be placed."""
        ...

    @property
    def fast_path(self) -> bool:
        """Whether ``placement`` may judge this filter on one representative pod per load class:
        its verdict on a pod that hosts no target of the Run's terms, is not its workspace pod,
        has a fresh heartbeat and holds no reservation depends only on the pod's load class and
        static availability, and its prepared filter is a ``BatchFilter`` (or ``None``)."""
        ...

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        """PreFilter, once per cycle. ``run`` is ``snapshot.run`` (known present and Pending).

        Return the pod filter, or ``None`` when every pod passes this cycle.
        """
        ...

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        """The Pending message this plugin asks for, or ``None`` to leave it to the others.

        Asked once per cycle that ends in ``Wait`` (no feasible pod), and only of a
        plugin that rejected at least one pod: ``reasons`` (never empty) are the
        declared reasons it returned this cycle. The framework keeps the claim of
        highest ``rank`` (the first registered among equal ranks) and falls back to
        the generic message when no plugin claims one.
        """
        ...

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        """Why this plugin rejected ``slot`` for ``reason`` (one of its ``reasons``), in words.

        Shown by ``kruntimes explain`` beside the pod, for the operator's terminal
        only, so it may name pods, resources and selectors (it never reaches a
        status). Called only off the scheduling path: it may take its time.
        """
        ...


class ScorePlugin(Protocol):
    """PreScore + Score + NormalizeScore."""

    @property
    def name(self) -> str: ...

    @property
    def fast_path(self) -> bool:
        """Whether ``placement`` may score one representative pod per load class: the raw score
        of a pod that hosts no target of the Run's terms depends only on its load class, and the
        normalized scores do not change when a pod is counted more than once — or the plugin
        scores units itself (``ScoresUnits``)."""
        ...

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        """PreScore, once per cycle with at least one feasible pod."""
        ...

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        """NormalizeScore: map the raw scores of all feasible pods into 0..100."""
        ...


@runtime_checkable
class ScoresUnits(Protocol):
    """A fast-path score plugin whose normalized score depends on how many pods share a raw
    score (a rank): ``placement`` asks it for the scores of units of alike pods."""

    def score_units(self, run: Run, slots: tuple[PodSlot, ...], sizes: Sequence[int]) -> Sequence[int]:
        """The normalized score of each unit: ``slots[i]`` stands for ``sizes[i]`` alike pods."""
        ...


def keep_scores(raw: tuple[int, ...]) -> tuple[int, ...]:
    """The identity normalizer, for scorers whose raw scores already lie in 0..100."""
    return raw


def normalize_to_max(raw: tuple[int, ...]) -> tuple[int, ...]:
    """``raw × 100 // max(raw)``; all 0 when the maximum is 0 (or there is none)."""
    top = max(raw, default=0)
    if top <= 0:
        return (0,) * len(raw)
    if min(raw) == top:
        return (100,) * len(raw)
    return tuple([value * 100 // top for value in raw])
