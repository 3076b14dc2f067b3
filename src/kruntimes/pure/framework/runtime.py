"""The framework runtime: run a registry's filters and scores over one snapshot.

``prepare_filters`` is PreFilter (once per cycle, every filter in registration
order); ``run_filters`` then judges the snapshot's pods, the first rejection
stopping a pod and counting once for (plugin, reason); ``run_scores`` scores the
feasible pods with every score plugin, checks and weights the normalized scores
and finds the best pod (SPEC §5); ``wait_message`` asks the filters that
rejected pods which Pending message a cycle without a feasible pod writes (SPEC §7). Planning (``kruntimes.pure.planner``) and
``explain`` both run these, so the verdicts ``explain`` shows are the ones the
scheduler acts on.

This is a purely computational module with no side effects.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import NamedTuple

from returns.result import Failure, Result, Success

# ``isinstance(result, Success)`` rather than ``returns.pipeline.is_successful`` on this path:
# the same answer for a Result, without a call and an exception per check (several per cycle).

from kruntimes.pure.framework.batch import BatchFilter
from kruntimes.pure.framework.interface import MAX_SCORE, MIN_SCORE, PendingMessage, PodFilter
from kruntimes.pure.framework.registry import FilterEntry, Registry
from kruntimes.pure.model.messages import waiting_for_pods
from kruntimes.pure.model.objects import PodSlot, Run, Snapshot
from kruntimes.pure.model.plan import CycleError, Rejections, ScoreTable

__all__ = [
    "Filtered",
    "Scored",
    "prepare_filters",
    "rejection_table",
    "run_filters",
    "run_scores",
    "undeclared_reason",
    "wait_message",
]


def prepare_filters(
    run: Run, snapshot: Snapshot, registry: Registry
) -> Result[tuple[tuple[int, FilterEntry, PodFilter], ...], CycleError]:
    """PreFilter: every filter once, in registration order; ``(index, entry, prepared filter)``
    for each filter that has something to judge this cycle."""
    active: list[tuple[int, FilterEntry, PodFilter]] = []
    for index, entry in enumerate(registry.filters):
        prepared = entry.plugin.prepare(run, snapshot)
        if not isinstance(prepared, Success):
            return Failure(prepared.failure())
        pod_filter = prepared.unwrap()
        if pod_filter is not None:
            active.append((index, entry, pod_filter))
    return Success(tuple(active))


class Filtered(NamedTuple):
    """What the filters left: the feasible pods (snapshot order) and the rejections counted.
    (A ``NamedTuple``: one is built per cycle, and a tuple is the cheapest immutable record.)"""

    feasible: tuple[PodSlot, ...]
    rejections: Rejections
    """``(plugin, reason, count)`` by registration order, then reason."""


def run_filters(run: Run, snapshot: Snapshot, registry: Registry) -> Result[Filtered, CycleError]:
    """PreFilter, then Filter every pod of the snapshot (SPEC §3.9–3.10).

    Filters run one after the other over the survivors of the previous ones,
    which is the same as running each pod through them in order: a whole list
    at a time when the filter can (``BatchFilter.select``), else one call per
    surviving pod. A reason the plugin did not declare fails the cycle.
    """
    prepared = prepare_filters(run, snapshot, registry)
    if not isinstance(prepared, Success):
        return Failure(prepared.failure())
    counts: dict[tuple[int, str], int] = {}
    feasible: Sequence[PodSlot] = snapshot.pods
    for index, _, pod_filter in prepared.unwrap():
        if not feasible:
            break
        if isinstance(pod_filter, BatchFilter):
            feasible, rejected = pod_filter.select(feasible)
            for reason, count in rejected.items():  # one select per filter: each key is new
                counts[(index, reason)] = count
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
    if not counts:
        return Success(Filtered(tuple(feasible), ()))
    rejections = rejection_table(registry, counts)
    if not isinstance(rejections, Success):
        return Failure(rejections.failure())
    return Success(Filtered(tuple(feasible), rejections.unwrap()))


def rejection_table(registry: Registry, counts: dict[tuple[int, str], int]) -> Result[Rejections, CycleError]:
    """``(plugin, reason, count)`` by registration order, then reason; reasons must be declared."""
    result: list[tuple[str, str, int]] = []
    for (index, reason), count in sorted(counts.items()):
        entry = registry.filters[index]
        if reason not in entry.plugin.reasons:
            return Failure(undeclared_reason(entry.name, reason))
        result.append((entry.name, reason, count))
    return Success(tuple(result))


def undeclared_reason(plugin: str, reason: str) -> CycleError:
    """The cycle error for a filter reason outside the plugin's declared set (cut: it is the plugin's text)."""
    return CycleError("PluginError", f'filter plugin "{plugin}" returned undeclared reason {reason[:64]!r}')


def wait_message(run: Run, registry: Registry, rejections: Rejections) -> str:
    """The Pending message of a cycle that found no feasible pod (SPEC §7).

    Each filter that rejected a pod is asked once, with the reasons it gave; the
    claim of highest rank wins, the first registered among equal ranks. Without a
    claim (or without rejections: no candidate pods) the message is the generic one.
    """
    best: PendingMessage | None = None
    count = len(rejections)
    start = 0
    while start < count:  # each plugin's rejections are one run of them (registration order)
        plugin = rejections[start][0]
        end = start + 1
        while end < count and rejections[end][0] == plugin:
            end += 1
        entry = registry.filter_by_name.get(plugin)
        if entry is not None:
            claim = entry.plugin.pending_message(frozenset([r[1] for r in rejections[start:end]]), run)
            if claim is not None and (best is None or claim.rank > best.rank):
                best = claim
        start = end
    return best.text if best is not None else waiting_for_pods(run.runtime)


class Scored(NamedTuple):
    """The best feasible pod and the table that ranks them all (on first read)."""

    best: PodSlot
    table: ScoreTable


def run_scores(
    run: Run, snapshot: Snapshot, registry: Registry, feasible: tuple[PodSlot, ...]
) -> Result[Scored, CycleError]:
    """Score, normalize, check 0..100, weight, sum (SPEC §5); ``feasible`` is not empty."""
    count = len(feasible)
    names: list[str] = []
    columns: list[tuple[int, ...]] = []
    totals = [0] * count
    for entry in registry.scores:
        plugin = entry.plugin
        prepared = plugin.prepare(run, snapshot)
        if not isinstance(prepared, Success):
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
    return Success(Scored(best, ScoreTable(pod_names, names, columns, totals)))


def _wrong_length(name: str, what: str, got: int, want: int) -> CycleError:
    return CycleError("PluginError", f'score plugin "{name}" returned {got} {what} scores for {want} pods')
