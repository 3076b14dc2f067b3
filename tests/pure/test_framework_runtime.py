"""``run_scores`` and ``normalize_to_max`` as a library caller calls them, against SPEC §5
written plainly: any feasible pods, in any order, scored by any score plugins and weights; each
pod's total is the weighted sum of its scores; the ranking is total descending, then name
ascending; the best pod is its first. A normalized score is ``raw × 100 // max(raw)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, final

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Result, Success

from kruntimes.pure.framework.registry import EMPTY_REGISTRY, must
from kruntimes.pure.framework.runtime import run_filters, run_scores
from kruntimes.pure.model.objects import PodSlot, Run, Snapshot
from kruntimes.pure.model.plan import CycleError, PodScore
from kruntimes.pure.framework.interface import (
    FilterPlugin,
    ParkKind,
    PendingMessage,
    PodFilter,
    PodScorer,
    ScorePlugin,
    keep_scores,
    normalize_to_max,
)
from tests.builders import decoded_run
from tests.pure.planning_world import slot, snapshot


@final
@dataclass(frozen=True)
class ByName:
    """A score plugin whose score for each pod is given by name."""

    name: str
    scores: Mapping[str, int]
    fast_path: ClassVar[bool] = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        return Success(lambda slots: tuple(self.scores[s.pod.name] for s in slots))

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        return raw


def built(plugin: ByName) -> Callable[[], ScorePlugin]:
    return lambda: plugin


@st.composite
def scorings(draw: st.DrawFn) -> tuple[list[str], list[tuple[ByName, int]]]:
    names = draw(st.lists(st.text("abc", min_size=1, max_size=3), min_size=1, max_size=8, unique=True))
    order = draw(st.permutations(names))
    plugins = [
        (ByName(f"S{k}", {n: draw(st.integers(0, 100)) for n in names}), draw(st.integers(1, 3)))
        for k in range(draw(st.integers(0, 3)))
    ]
    return list(order), plugins


@given(scorings())
def test_run_scores_ranks_any_order_of_feasible_pods_by_weighted_total_then_name(
    scoring: tuple[list[str], list[tuple[ByName, int]]],
) -> None:
    order, plugins = scoring
    registry = EMPTY_REGISTRY
    for plugin, weight in plugins:
        registry = must(registry.register_score(plugin.name, weight, built(plugin)))
    feasible = tuple(slot(name) for name in order)
    run = decoded_run("r")
    scored = run_scores(run, snapshot(run, feasible), registry, feasible).unwrap()

    rows = {n: tuple((p.name, p.scores[n]) for p, _ in plugins) for n in order}
    totals = {n: sum(p.scores[n] * w for p, w in plugins) for n in order}
    expected = sorted(order, key=lambda n: (-totals[n], n))
    assert scored.best is feasible[order.index(expected[0])]
    assert scored.table.ranked() == tuple(PodScore(n, rows[n], totals[n]) for n in expected)
    assert len(scored.table) == len(order)


@given(st.lists(st.integers(-5, 300), max_size=8).map(tuple))
def test_normalize_to_max_is_raw_times_100_floor_divided_by_the_maximum(raw: tuple[int, ...]) -> None:
    top = max(raw, default=0)
    expected = tuple(0 for _ in raw) if top <= 0 else tuple(v * 100 // top for v in raw)
    assert normalize_to_max(raw) == expected
    assert keep_scores(raw) is raw


@final
@dataclass(frozen=True)
class ByPrefix:
    """Rejects, one call per pod, the pods whose name starts with ``prefix``: ``Long`` for a name
    of more than two characters, else ``Short``."""

    name: str
    prefix: str
    reasons: ClassVar[frozenset[str]] = frozenset({"Long", "Short"})
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {"Long": "capacity", "Short": "capacity"}
    fast_path: ClassVar[bool] = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        return Success(self.verdict)

    def verdict(self, slot: PodSlot) -> str | None:
        name = slot.pod.name
        return None if not name.startswith(self.prefix) else "Long" if len(name) > 2 else "Short"

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return None

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return reason


def filter_factory(plugin: ByPrefix) -> Callable[[], FilterPlugin]:
    return lambda: plugin


@given(
    st.lists(st.text("abc", min_size=1, max_size=4), max_size=12, unique=True),
    st.lists(st.text("abc", max_size=2), max_size=3),
)
def test_run_filters_counts_each_rejected_pod_once_under_the_first_filter_that_rejects_it(
    names: list[str], prefixes: list[str]
) -> None:
    plugins = [ByPrefix(f"F{k}", prefix) for k, prefix in enumerate(prefixes)]
    registry = EMPTY_REGISTRY
    for plugin in plugins:
        registry = must(registry.register_filter(plugin.name, filter_factory(plugin)))
    pods = tuple(slot(name) for name in names)
    run = decoded_run("r")
    filtered = run_filters(run, snapshot(run, pods), registry).unwrap()

    counts: dict[tuple[int, str], int] = {}
    feasible = []
    for pod in pods:
        first = next(((k, p.verdict(pod)) for k, p in enumerate(plugins) if p.verdict(pod) is not None), None)
        if first is None:
            feasible.append(pod)
        else:
            counts[(first[0], str(first[1]))] = counts.get((first[0], str(first[1])), 0) + 1
    assert filtered.feasible == tuple(feasible)
    assert filtered.rejections == tuple((plugins[k].name, reason, n) for (k, reason), n in sorted(counts.items()))


@pytest.mark.parametrize("bound", [0, 100])
def test_a_score_outside_0_to_100_is_reported_for_the_first_pod_outside_after_scores_at_a_bound(bound: int) -> None:
    plugin = ByName("S", {"a": bound, "b": 50, "c": 101, "d": -1})
    registry = must(EMPTY_REGISTRY.register_score("S", 1, built(plugin)))
    feasible = tuple(slot(name) for name in "abcd")
    run = decoded_run("r")
    assert run_scores(run, snapshot(run, feasible), registry, feasible).failure() == CycleError(
        "ScoreError", 'score plugin "S" pod "c" returned 101 outside 0..100'
    )
