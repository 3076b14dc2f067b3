"""The scheduling framework: extension points, the plugin registry, and one cycle.

Shaped after the Kubernetes scheduler framework. A plugin is an immutable value
that implements one small protocol per extension point:

- **PreFilter** — ``FilterPlugin.prepare(run, snapshot)``, once per cycle: compile
  and resolve what the plugin needs (selector pod sets, the workspace
  constraint) and return the prepared **Filter**, a ``PodFilter`` closure
  ``(PodSlot) -> reason | None``. Returning ``None`` instead of a filter means
  "this plugin passes every pod this cycle" (Kubernetes' PreFilter ``Skip``).
- **PreScore / Score** — ``ScorePlugin.prepare(run, snapshot)`` returns a
  ``PodScorer`` ``(feasible slots) -> raw scores``; **NormalizeScore** —
  ``ScorePlugin.normalize(raw) -> scores``, each in 0..100.

All prepared state lives in the closures a cycle creates and drops: nothing is
shared between cycles, so plugins need no locks and cycles replay exactly.

What the framework does with each answer (the "status codes"):

- a filter reason (``str``): the pod is infeasible for this Run *now*; it is
  counted once for (plugin, reason) and the cycle may end in ``Wait`` (requeue
  after 30 s or on a wakeup). The reason must be one of the plugin's declared
  ``reasons`` (a closed set: it becomes a metric label), else ``PluginError``.
- ``Failure(CycleError)`` from any ``prepare``, a scorer returning the wrong
  number of scores, or a normalized score outside 0..100 (``ScoreError``): the
  cycle decides nothing — no reservation, no status write — and the key is
  retried with per-key exponential back-off (the error is transient or a bug,
  never a property of the Run).
- ``ConfigError`` from the registry: a programming/configuration mistake at
  start-up; the scheduler refuses to start.

``plan_cycle`` itself is a purely computational function with no side effects;
``effects`` performs the reservation and the status write it asks for.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final, Literal, Protocol, TypeAlias, TypeVar, cast, final

from returns.pipeline import is_successful
from returns.result import Failure, Result, Success

from kruntimes.pure import messages
from kruntimes.pure.model import PodSlot, Run, Snapshot, first_condition
from kruntimes.pure.plan import (
    Bind,
    Cancel,
    CycleError,
    Delay,
    Fail,
    Plan,
    Rejections,
    ScoreTable,
    Skip,
    Wait,
    ranked_views,
)
from kruntimes.pure.plugins.affinity import RunAffinity
from kruntimes.pure.plugins.availability import RuntimePodAvailability
from kruntimes.pure.plugins.batch import BatchFilter
from kruntimes.pure.plugins.least_loaded import LeastLoaded
from kruntimes.pure.plugins.preferred import PreferredRunAffinity, normalize_to_max
from kruntimes.pure.plugins.workspace import WorkspacePlacement

__all__ = [
    "DEFAULT_REGISTRY",
    "EMPTY_REGISTRY",
    "MAX_SCORE",
    "MIN_SCORE",
    "ConfigError",
    "ConfigErrorReason",
    "FilterEntry",
    "FilterPlugin",
    "PodFilter",
    "PodScorer",
    "Registry",
    "ScoreEntry",
    "ScorePlugin",
    "keep_scores",
    "normalize_to_max",
    "plan_cycle",
    "precheck",
    "retry_backoff",
    "retry_due",
]

MIN_SCORE: Final = 0
MAX_SCORE: Final = 100

# --- extension points --------------------------------------------------------------

PodFilter: TypeAlias = Callable[[PodSlot], "str | None"]
"""A prepared Filter: ``None`` when the pod passes, else the rejection reason."""

PodScorer: TypeAlias = Callable[[tuple[PodSlot, ...]], tuple[int, ...]]
"""A prepared Score: one raw score per feasible slot, in the order given."""


class FilterPlugin(Protocol):
    """PreFilter + Filter. Implementations are immutable values (``@final`` frozen dataclasses)."""

    @property
    def name(self) -> str:
        """The registry name; the ``plugin`` metric label."""
        ...

    @property
    def reasons(self) -> frozenset[str]:
        """Every reason the filter may return: a closed set (the ``reason`` metric label)."""
        ...

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        """PreFilter, once per cycle. ``run`` is ``snapshot.run`` (known present and Pending).

        Return the pod filter, or ``None`` when every pod passes this cycle.
        """
        ...


class ScorePlugin(Protocol):
    """PreScore + Score + NormalizeScore."""

    @property
    def name(self) -> str: ...

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        """PreScore, once per cycle with at least one feasible pod."""
        ...

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        """NormalizeScore: map the raw scores of all feasible pods into 0..100."""
        ...


def keep_scores(raw: tuple[int, ...]) -> tuple[int, ...]:
    """The identity normalizer, for scorers whose raw scores already lie in 0..100."""
    return raw


# --- registry ------------------------------------------------------------------------

ConfigErrorReason: TypeAlias = Literal["DuplicatePlugin", "InvalidWeight", "UnknownPlugin", "NameMismatch"]


@final
@dataclass(frozen=True, slots=True)
class ConfigError:
    """A registry that cannot be built: the scheduler must not start with it."""

    reason: ConfigErrorReason
    message: str

    def __str__(self) -> str:
        return self.message


@final
@dataclass(frozen=True, slots=True)
class FilterEntry:
    name: str
    factory: Callable[[], FilterPlugin]
    plugin: FilterPlugin
    """``factory()``, built once at registration: plugins are values, a cycle never builds one."""


@final
@dataclass(frozen=True, slots=True)
class ScoreEntry:
    name: str
    weight: int
    factory: Callable[[], ScorePlugin]
    plugin: ScorePlugin


@final
@dataclass(frozen=True, slots=True)
class Registry:
    """An immutable, ordered plugin set. Filters run in registration order.

    Build one with ``EMPTY_REGISTRY.register_filter(...)`` / ``register_score(...)``;
    every method returns a new registry (or a ``ConfigError``) and leaves this one as is.
    """

    filters: tuple[FilterEntry, ...] = ()
    scores: tuple[ScoreEntry, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.filters) + tuple(e.name for e in self.scores)

    @property
    def weights(self) -> tuple[tuple[str, int], ...]:
        """``(score plugin, weight)`` in registration order (what a cycle record logs)."""
        return tuple((e.name, e.weight) for e in self.scores)

    def register_filter(self, name: str, factory: Callable[[], FilterPlugin]) -> Result[Registry, ConfigError]:
        """Append a filter (it runs after every filter registered before it)."""
        refused = self._refuse_name(name)
        if refused is not None:
            return Failure(refused)
        plugin = factory()
        if plugin.name != name:
            return Failure(_name_mismatch(name, plugin.name))
        return Success(replace(self, filters=self.filters + (FilterEntry(name, factory, plugin),)))

    def register_score(
        self, name: str, weight: int, factory: Callable[[], ScorePlugin]
    ) -> Result[Registry, ConfigError]:
        refused = self._refuse_name(name) or _refuse_weight(name, weight)
        if refused is not None:
            return Failure(refused)
        plugin = factory()
        if plugin.name != name:
            return Failure(_name_mismatch(name, plugin.name))
        return Success(replace(self, scores=self.scores + (ScoreEntry(name, weight, factory, plugin),)))

    def with_weight(self, name: str, weight: int) -> Result[Registry, ConfigError]:
        """The same registry with score plugin ``name`` weighted ``weight`` (> 0)."""
        refused = _refuse_weight(name, weight)
        if refused is not None:
            return Failure(refused)
        if name not in {e.name for e in self.scores}:
            return Failure(ConfigError("UnknownPlugin", f'no score plugin "{name}" is registered'))
        scores = tuple(replace(e, weight=weight) if e.name == name else e for e in self.scores)
        return Success(replace(self, scores=scores))

    def with_weights(self, weights: Iterable[tuple[str, int]]) -> Result[Registry, ConfigError]:
        """Apply several overrides (e.g. the weights a cycle record logged)."""
        registry = self
        for name, weight in weights:
            result = registry.with_weight(name, weight)
            if not is_successful(result):
                return result
            registry = result.unwrap()
        return Success(registry)

    def _refuse_name(self, name: str) -> ConfigError | None:
        if name in self.names:
            return ConfigError("DuplicatePlugin", f'plugin "{name}" is already registered')
        return None


def _refuse_weight(name: str, weight: int) -> ConfigError | None:
    if isinstance(weight, bool) or not isinstance(weight, int) or weight <= 0:
        return ConfigError("InvalidWeight", f'score plugin "{name}" weight must be a positive integer, got {weight!r}')
    return None


def _name_mismatch(name: str, actual: str) -> ConfigError:
    return ConfigError("NameMismatch", f'plugin registered as "{name}" calls itself "{actual}"')


EMPTY_REGISTRY: Final = Registry()

_T = TypeVar("_T")


def _must(result: Result[_T, ConfigError]) -> _T:
    """Unwrap a registry built from constants: a failure here is a bug, caught at import."""
    if not is_successful(result):
        raise AssertionError(str(result.failure()))
    return result.unwrap()


# The default plugin set, one line per plugin. Filter order is SPEC §4's and it is
# observable: a pod is counted under the first filter that rejects it, and the wait
# message follows those counts. Availability first (a pod that is down or full is
# "unavailable", whatever else is true of it), then required Run (anti-)affinity,
# then workspace placement. Score plugins are independent of each other; their
# registration order is the order of `PodScore.by_plugin` and of the logged weights.
DEFAULT_REGISTRY: Final[Registry] = _must(
    EMPTY_REGISTRY.register_filter("RuntimePodAvailability", RuntimePodAvailability)
    .bind(lambda r: r.register_filter("RunAffinity", RunAffinity))
    .bind(lambda r: r.register_filter("WorkspacePlacement", WorkspacePlacement))
    .bind(lambda r: r.register_score("PreferredRunAffinity", 1, PreferredRunAffinity))
    .bind(lambda r: r.register_score("LeastLoaded", 1, LeastLoaded))
)

# --- SPEC §3 steps 2–7: the rules that end a cycle before any plugin runs ----------------

DEFAULT_RETRY_BASE: Final = timedelta(seconds=1)
MAX_RETRY_BACKOFF: Final = timedelta(seconds=60)
_MAX_SHIFT: Final = 40
"""2**40 µs is far beyond the 60 s cap, so larger exponents need no arithmetic."""


def retry_backoff(run: Run) -> timedelta:
    """base × 2^max(attempt − 2, 0), capped at 60 s; base = ``retryPolicy.backoff`` or 1 s (SPEC §3.6)."""
    base = run.retry_backoff
    if base is None or base <= timedelta(0):
        base = DEFAULT_RETRY_BASE
    shift = min(max(run.status.attempt - 2, 0), _MAX_SHIFT)
    micros = (base // timedelta(microseconds=1)) << shift
    if micros >= MAX_RETRY_BACKOFF // timedelta(microseconds=1):
        return MAX_RETRY_BACKOFF
    return timedelta(microseconds=micros)


def retry_due(run: Run) -> datetime | None:
    """When a retried Run may be scheduled again, or ``None`` when no delay applies.

    Applies to a Pending Run (empty phase counts) with ``attempt > 1`` whose first
    ``Running`` condition is ``False``; without a ``lastTransitionTime`` there is
    nothing to wait from (upstream reads a zero time), so no delay.
    """
    if not run.status.pending or run.status.attempt <= 1:
        return None
    running = first_condition(run.status.conditions, messages.CONDITION_RUNNING)
    if running is None or running.status != "False" or running.last_transition_time is None:
        return None
    return running.last_transition_time + retry_backoff(run)


def precheck(snapshot: Snapshot) -> Plan | None:
    """SPEC §3 steps 2–7, in order; ``None`` when the Run goes on to filtering.

    Placement of ``spec_error`` (a malformed spec field other than requests and
    affinity, reason ``InvalidSpec``): right after ``cancelRequested``. An empty
    runtime ends the cycle (``Skip("no runtime")``, SPEC order: before cancel)
    *only when the spec is well formed*: a runtime that is empty because the spec
    or the field is malformed is a symptom of that ``spec_error``, so such a Run
    still reaches cancel and then ``Fail("InvalidSpec")``.
    """
    run = snapshot.run
    if run is None:
        return Skip("not found")
    if not run.status.pending:
        return Skip("not pending")
    if run.runtime == "" and run.spec_error is None:
        return Skip("no runtime")
    if run.cancel_requested:
        return Cancel(messages.REASON_CANCELLED, messages.CANCELLED_MESSAGE)
    if run.spec_error is not None:
        return Fail(messages.REASON_INVALID_SPEC, run.spec_error)
    if run.requests_error is not None:
        return Fail(messages.REASON_INVALID_RESOURCES, run.requests_error)
    if run.affinity_error is not None:
        return Fail(messages.REASON_INVALID_AFFINITY, messages.invalid_affinity_message(run.affinity_error))
    due = retry_due(run)
    if due is not None and due > snapshot.now:
        return Delay((due - snapshot.now).total_seconds())
    if snapshot.reservation is not None:
        return Skip("awaiting bind observation")
    return None


# --- the cycle -----------------------------------------------------------------------------


def plan_cycle(snapshot: Snapshot, registry: Registry = DEFAULT_REGISTRY) -> Result[Plan, CycleError]:
    """Decide what to do with ``snapshot.run`` (SPEC §3 steps 2–12).

    A purely computational function with no side effects: the same snapshot and
    registry always give the same plan, whatever the order of ``snapshot.pods``
    and ``snapshot.targets``. The effect layer performs what the plan asks.
    """
    early = precheck(snapshot)
    if early is not None:
        return Success(early)
    run = snapshot.run
    assert run is not None  # precheck answers Skip("not found") otherwise

    # PreFilter: every plugin, once, in registration order.
    active: list[tuple[int, PodFilter]] = []
    for index, entry in enumerate(registry.filters):
        prepared = entry.plugin.prepare(run, snapshot)
        if not is_successful(prepared):
            return Failure(prepared.failure())
        pod_filter = prepared.unwrap()
        if pod_filter is not None:
            active.append((index, pod_filter))

    # Filter: the first rejection stops a pod and counts once for (plugin, reason).
    # Filters run one after the other over the survivors of the previous ones,
    # which is the same thing: a whole list at a time when the filter can
    # (``BatchFilter.select``), else one call per surviving pod.
    counts: dict[tuple[int, str], int] = {}
    feasible: Sequence[PodSlot] = snapshot.pods
    for index, pod_filter in active:
        if not feasible:
            break
        if isinstance(pod_filter, BatchFilter):
            feasible, rejected = pod_filter.select(feasible)
            for reason, count in rejected.items():
                counts[(index, reason)] = counts.get((index, reason), 0) + count
            continue
        kept: list[PodSlot] = []
        for slot in feasible:
            verdict = pod_filter(slot)
            if verdict is None:
                kept.append(slot)
            else:
                key = (index, verdict)
                counts[key] = counts.get(key, 0) + 1
        feasible = kept

    rejections_or_error = _rejections(registry, counts)
    if not is_successful(rejections_or_error):
        return Failure(rejections_or_error.failure())
    rejections = rejections_or_error.unwrap()

    if not feasible:
        workspace = run.workspace.name if run.workspace is not None else None
        message = messages.wait_message((reason for _, reason in counts), run.runtime, workspace)
        return Success(Wait(message, rejections))

    return _score(run, snapshot, registry, tuple(feasible)).map(
        lambda scored: _bind(scored[0], scored[1], rejections)
    )


def _bind(best: PodSlot, table: ScoreTable, rejections: Rejections) -> Bind:
    ranking, scores = ranked_views(table)
    return Bind(pod=best.pod.name, pod_uid=best.pod.uid, ranking=ranking, scores=scores, rejections=rejections)


def _rejections(registry: Registry, counts: dict[tuple[int, str], int]) -> Result[Rejections, CycleError]:
    """``(plugin, reason, count)`` by registration order, then reason; reasons must be declared."""
    result: list[tuple[str, str, int]] = []
    for (index, reason), count in sorted(counts.items()):
        entry = registry.filters[index]
        if reason not in entry.plugin.reasons:
            return Failure(
                CycleError(
                    "PluginError",
                    f'filter plugin "{entry.name}" returned undeclared reason {reason[:64]!r}',
                )
            )
        result.append((entry.name, reason, count))
    return Success(tuple(result))


def _score(
    run: Run, snapshot: Snapshot, registry: Registry, feasible: tuple[PodSlot, ...]
) -> Result[tuple[PodSlot, ScoreTable], CycleError]:
    """Score, normalize, check 0..100, weight, sum (SPEC §5): the best slot, and the table that ranks them all."""
    count = len(feasible)
    names: list[str] = []
    columns: list[tuple[int, ...]] = []
    totals = [0] * count
    for entry in registry.scores:
        plugin = entry.plugin
        prepared = plugin.prepare(run, snapshot)
        if not is_successful(prepared):
            return Failure(prepared.failure())
        raw = prepared.unwrap()(feasible)
        if len(raw) != count:
            return Failure(_wrong_length(entry.name, "raw", len(raw), count))
        scores = plugin.normalize(raw)
        if len(scores) != count:
            return Failure(_wrong_length(entry.name, "normalized", len(scores), count))
        if count and (min(scores) < MIN_SCORE or max(scores) > MAX_SCORE):
            i, value = next((i, v) for i, v in enumerate(scores) if not MIN_SCORE <= v <= MAX_SCORE)
            return Failure(
                CycleError(
                    "ScoreError",
                    f'score plugin "{entry.name}" pod "{feasible[i].pod.name}" returned {value} outside 0..100',
                )
            )
        weight = entry.weight
        weighted = scores if weight == 1 else [value * weight for value in scores]
        totals = list(map(operator.add, totals, weighted))
        names.append(entry.name)
        columns.append(scores)

    # Total descending, then pod name ascending (code point order = UTF-8 byte order).
    # A snapshot's pods come sorted by name (else they are put in name order first);
    # the best pod is the first by name with the top total. The full ranking is left
    # to the ScoreTable, which builds it only when read (cycle log, explain, simulate).
    pod_names = [slot.pod.name for slot in feasible]
    if not all(map(operator.lt, pod_names, itertools.islice(pod_names, 1, None))):
        by_name = sorted(range(count), key=pod_names.__getitem__)
        pod_names = list(map(pod_names.__getitem__, by_name))
        columns = [tuple(map(column.__getitem__, by_name)) for column in columns]
        totals = list(map(totals.__getitem__, by_name))
        feasible = tuple(map(feasible.__getitem__, by_name))
    best = feasible[totals.index(max(totals))]
    return Success((best, ScoreTable(pod_names, names, columns, totals)))


def _wrong_length(name: str, what: str, got: int, want: int) -> CycleError:
    return CycleError("PluginError", f'score plugin "{name}" returned {got} {what} scores for {want} pods')
