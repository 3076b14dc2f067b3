"""The framework contract: the registry, custom plugins, and what each error does (SPEC §3, §5)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, final

import pytest
from returns.pipeline import is_successful
from returns.result import Failure, Result, Success

from kruntimes.pure.framework.interface import (
    ParkKind,
    FilterPlugin,
    PendingMessage,
    PodFilter,
    PodScorer,
    ScorePlugin,
    keep_scores,
    normalize_to_max,
)
from kruntimes.pure.framework.registry import EMPTY_REGISTRY, RegistryError, Registry
from kruntimes.pure.planner import plan_cycle, retry_backoff
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.model.objects import PodSlot, Run, Snapshot
from kruntimes.pure.model.plan import Bind, CycleError, Wait
from kruntimes.pure.plugins.affinity import RunAffinity
from kruntimes.pure.plugins.least_loaded import LeastLoaded
from kruntimes.pure.plugins.preferred import PreferredRunAffinity
from tests.builders import decoded_run
from tests.pure.planning_world import plan, rejections_map, slot, snapshot

# --- a custom filter and a custom score plugin, shaped as the README shows --------------------


@final
@dataclass(frozen=True, slots=True)
class AvoidDraining:
    """Reject pods whose name says they are draining (a toy hard predicate); it claims no Pending message."""

    name: ClassVar[str] = "AvoidDraining"
    reasons: ClassVar[frozenset[str]] = frozenset({"PodDraining"})
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {"PodDraining": "capacity"}
    fast_path: ClassVar[bool] = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        def pod_filter(slot: PodSlot) -> str | None:
            return "PodDraining" if slot.pod.name.startswith("draining-") else None

        return Success(pod_filter)

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return None

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return "the pod is draining"


@final
@dataclass(frozen=True, slots=True)
class PreferShortNames:
    """Score shorter pod names higher (a toy soft preference)."""

    name: ClassVar[str] = "PreferShortNames"
    fast_path: ClassVar[bool] = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        return Success(lambda slots: tuple(max(0, 20 - len(s.pod.name)) for s in slots))

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        return normalize_to_max(raw)


_filter: FilterPlugin = AvoidDraining()
_score: ScorePlugin = PreferShortNames()


def custom_registry() -> Registry:
    return (
        DEFAULT_REGISTRY.register_filter("AvoidDraining", AvoidDraining)
        .bind(lambda r: r.register_score("PreferShortNames", 2, PreferShortNames))
        .unwrap()
    )


def test_a_custom_filter_runs_after_the_default_filters_and_counts_its_reason() -> None:
    snap = snapshot(decoded_run("r"), (slot("draining-1"), slot("ok-1"), slot("draining-2", ready=False)))
    result = plan(snap, custom_registry())
    assert isinstance(result, Bind)
    assert result.ranking == ("ok-1",)
    assert rejections_map(result.rejections) == {
        "RuntimePodAvailability": {"RuntimePodUnavailable": 1},
        "AvoidDraining": {"PodDraining": 1},
    }


def test_a_custom_score_plugin_is_weighted_into_the_total() -> None:
    snap = snapshot(decoded_run("r"), (slot("p-long-name"), slot("p")))
    result = plan(snap, custom_registry())
    assert isinstance(result, Bind)
    assert result.pod == "p"
    top = result.scores[0]
    assert top.by_plugin == (("PreferredRunAffinity", 0), ("LeastLoaded", 100), ("PreferShortNames", 100))
    assert top.total == 0 + 100 + 2 * 100


def test_a_custom_filter_rejecting_everything_gives_the_generic_wait_message() -> None:
    snap = snapshot(decoded_run("r"), (slot("draining-1"),))
    result = plan(snap, custom_registry())
    assert result == Wait(
        'waiting for available runtime pods for runtime "python"', (("AvoidDraining", "PodDraining", 1),)
    )


# --- the registry -------------------------------------------------------------------------------


def test_default_registry_order_and_weights() -> None:
    assert tuple(e.name for e in DEFAULT_REGISTRY.filters) == ("RuntimePodAvailability", "RunAffinity", "WorkspacePlacement")
    assert DEFAULT_REGISTRY.weights == (("PreferredRunAffinity", 1), ("LeastLoaded", 1))


def test_registry_refuses_a_duplicate_name() -> None:
    result = DEFAULT_REGISTRY.register_filter("RunAffinity", RunAffinity)
    assert result.failure().reason == "DuplicatePlugin"
    assert str(result.failure()) == 'plugin "RunAffinity" is already registered'


def test_registry_refuses_a_name_used_by_the_other_kind() -> None:
    @final
    @dataclass(frozen=True, slots=True)
    class Clash:
        name: ClassVar[str] = "LeastLoaded"
        reasons: ClassVar[frozenset[str]] = frozenset({"X"})
        park_kinds: ClassVar[Mapping[str, ParkKind]] = {"X": "capacity"}
        fast_path: ClassVar[bool] = False

        def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
            return Success(None)

        def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
            return None

        def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
            return reason

    assert DEFAULT_REGISTRY.register_filter("LeastLoaded", Clash).failure().reason == "DuplicatePlugin"


@pytest.mark.parametrize("weight", [0, -1, -100])
def test_registry_refuses_a_weight_that_is_not_positive(weight: int) -> None:
    result = EMPTY_REGISTRY.register_score("LeastLoaded", weight, LeastLoaded)
    assert isinstance(result, Failure)
    assert result.failure() == RegistryError(
        "InvalidWeight", f'score plugin "LeastLoaded" weight must be a positive integer, got {weight}'
    )
    assert DEFAULT_REGISTRY.with_weight("LeastLoaded", weight).failure().reason == "InvalidWeight"


def test_registry_refuses_a_factory_whose_plugin_has_another_name() -> None:
    result = EMPTY_REGISTRY.register_score("Preferred", 1, PreferredRunAffinity)
    assert result.failure().reason == "NameMismatch"


def test_with_weight_overrides_one_weight_and_leaves_the_original_alone() -> None:
    heavier = DEFAULT_REGISTRY.with_weight("LeastLoaded", 5).unwrap()
    assert heavier.weights == (("PreferredRunAffinity", 1), ("LeastLoaded", 5))
    assert DEFAULT_REGISTRY.weights == (("PreferredRunAffinity", 1), ("LeastLoaded", 1))


def test_with_weight_refuses_an_unknown_or_filter_plugin() -> None:
    assert DEFAULT_REGISTRY.with_weight("Nope", 2).failure().reason == "UnknownPlugin"
    assert DEFAULT_REGISTRY.with_weight("RunAffinity", 2).failure().reason == "UnknownPlugin"


def test_with_weights_applies_a_logged_weight_set() -> None:
    logged = (("PreferredRunAffinity", 3), ("LeastLoaded", 2))
    assert DEFAULT_REGISTRY.with_weights(logged).unwrap().weights == logged
    assert not is_successful(DEFAULT_REGISTRY.with_weights((("LeastLoaded", 2), ("Nope", 1))))


def test_an_empty_registry_filters_nothing_and_ranks_by_name() -> None:
    result = plan(snapshot(decoded_run("r"), (slot("b"), slot("a", ready=False), slot("c"))), EMPTY_REGISTRY)
    assert isinstance(result, Bind)
    assert result.ranking == ("a", "b", "c")
    assert result.scores[0].by_plugin == () and result.scores[0].total == 0


# --- what each plugin error does --------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class FixedScore:
    name: ClassVar[str] = "Fixed"
    fast_path: ClassVar[bool] = False
    value: int = 101

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        return Success(lambda slots: tuple(self.value for _ in slots))

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        return keep_scores(raw)


def registry_with(plugin: ScorePlugin) -> Registry:
    return DEFAULT_REGISTRY.register_score(plugin.name, 1, lambda: plugin).unwrap()


@pytest.mark.parametrize("value", [101, -1])
def test_a_score_outside_0_to_100_is_a_cycle_error(value: int) -> None:
    snap = snapshot(decoded_run("r"), (slot("p1"), slot("p2")))
    result = plan_cycle(snap, registry_with(FixedScore(value)))
    assert result.failure() == CycleError(
        "ScoreError", f'score plugin "Fixed" pod "p1" returned {value} outside 0..100'
    )


def test_scores_at_the_bounds_are_accepted() -> None:
    for value in (0, 100):
        snap = snapshot(decoded_run("r"), (slot("p1"),))
        assert isinstance(plan(snap, registry_with(FixedScore(value))), Bind)


def test_a_score_plugin_is_not_run_when_nothing_is_feasible() -> None:
    snap = snapshot(decoded_run("r"), (slot("p1", ready=False),))
    assert isinstance(plan(snap, registry_with(FixedScore(500))), Wait)


@final
@dataclass(frozen=True, slots=True)
class ShortScorer:
    name: ClassVar[str] = "Short"
    fast_path: ClassVar[bool] = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        return Success(lambda slots: (1,))

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        return raw


def test_a_scorer_returning_the_wrong_number_of_scores_is_a_plugin_error() -> None:
    snap = snapshot(decoded_run("r"), (slot("p1"), slot("p2")))
    error = plan_cycle(snap, registry_with(ShortScorer())).failure()
    assert error == CycleError("PluginError", 'score plugin "Short" returned 1 raw scores for 2 pods')


@final
@dataclass(frozen=True, slots=True)
class Broken:
    name: ClassVar[str] = "Broken"
    reasons: ClassVar[frozenset[str]] = frozenset({"Declared"})
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {"Declared": "capacity"}
    fast_path: ClassVar[bool] = False
    fail_prepare: bool = False
    reason: str = "Undeclared"

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        if self.fail_prepare:
            return Failure(CycleError("PluginError", "Broken could not prepare"))
        return Success(lambda slot: self.reason)

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return None

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return reason


def test_a_prefilter_failure_aborts_the_cycle() -> None:
    registry = DEFAULT_REGISTRY.register_filter("Broken", lambda: Broken(fail_prepare=True)).unwrap()
    result = plan_cycle(snapshot(decoded_run("r"), (slot("p1"),)), registry)
    assert result.failure() == CycleError("PluginError", "Broken could not prepare")


def test_a_filter_reason_outside_its_declared_set_is_a_plugin_error() -> None:
    registry = DEFAULT_REGISTRY.register_filter("Broken", Broken).unwrap()
    result = plan_cycle(snapshot(decoded_run("r"), (slot("p1"),)), registry)
    assert result.failure() == CycleError("PluginError", "filter plugin \"Broken\" returned undeclared reason 'Undeclared'")


def test_an_undeclared_reason_is_quoted_in_the_error_cut_to_64_characters() -> None:
    reason = "".join(chr(ord("a") + i % 26) for i in range(100))
    registry = DEFAULT_REGISTRY.register_filter("Broken", lambda: Broken(reason=reason)).unwrap()
    result = plan_cycle(snapshot(decoded_run("r"), (slot("p1"),)), registry)
    assert result.failure() == CycleError("PluginError", f'filter plugin "Broken" returned undeclared reason {reason[:64]!r}')


def test_plugins_are_not_consulted_before_the_precheck_rules() -> None:
    registry = DEFAULT_REGISTRY.register_filter("Broken", lambda: Broken(fail_prepare=True)).unwrap()
    result = plan_cycle(snapshot(decoded_run("r", cancel=True), (slot("p1"),)), registry)
    assert is_successful(result)


# --- retry back-off -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "backoff", "expected"),
    [
        (0, None, timedelta(seconds=1)),
        (2, None, timedelta(seconds=1)),
        (3, None, timedelta(seconds=2)),
        (4, "3s", timedelta(seconds=12)),
        (7, None, timedelta(seconds=32)),
        (8, None, timedelta(seconds=60)),
        (5, "7500ms", timedelta(seconds=60)),
        (2, "-1s", timedelta(seconds=1)),
        (10**12, "1ms", timedelta(seconds=60)),
    ],
)
def test_retry_backoff(attempt: int, backoff: str | None, expected: timedelta) -> None:
    assert retry_backoff(decoded_run("r", attempt=attempt, backoff=backoff)) == expected


# --- the Pending message: claims by rank ----------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Claimer:
    """Rejects pods whose name starts with its ``prefix``, for a reason per name; claims at ``rank``."""

    name: str
    rank: int
    prefix: str

    fast_path: ClassVar[bool] = False

    @property
    def reasons(self) -> frozenset[str]:
        return frozenset({f"{self.name}Odd", f"{self.name}Even"})

    @property
    def park_kinds(self) -> Mapping[str, ParkKind]:
        return {reason: "capacity" for reason in self.reasons}

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        def pod_filter(slot: PodSlot) -> str | None:
            if not slot.pod.name.startswith(self.prefix):
                return None
            return f"{self.name}Odd" if len(slot.pod.name) % 2 else f"{self.name}Even"

        return Success(pod_filter)

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return PendingMessage(self.rank, f"{self.name} waits ({','.join(sorted(reasons))})")

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return reason


def claimers(*plugins: Claimer, base: Registry = EMPTY_REGISTRY) -> Registry:
    registry = base
    for plugin in plugins:
        registry = registry.register_filter(plugin.name, _factory(plugin)).unwrap()
    return registry


def _factory(plugin: Claimer) -> Callable[[], FilterPlugin]:
    return lambda: plugin


def test_the_highest_ranked_claim_wins_and_is_asked_with_exactly_the_reasons_its_plugin_gave() -> None:
    registry = claimers(Claimer("Low", 1, "x"), Claimer("High", 5, "y"))
    result = plan(snapshot(decoded_run("r"), (slot("x1"), slot("y1"), slot("y22"))), registry)
    assert isinstance(result, Wait)
    assert result.message == "High waits (HighEven,HighOdd)"
    result = plan(snapshot(decoded_run("r"), (slot("x1"), slot("y22"))), registry)
    assert isinstance(result, Wait) and result.message == "High waits (HighOdd)"
    result = plan(snapshot(decoded_run("r"), (slot("x1"), slot("x22"))), registry)
    assert isinstance(result, Wait) and result.message == "Low waits (LowEven,LowOdd)"


def test_among_equal_ranks_the_first_registered_filter_claims_the_message() -> None:
    pods = (slot("x1"), slot("y1"))
    first = plan(snapshot(decoded_run("r"), pods), claimers(Claimer("A", 3, "x"), Claimer("B", 3, "y")))
    second = plan(snapshot(decoded_run("r"), pods), claimers(Claimer("B", 3, "y"), Claimer("A", 3, "x")))
    assert isinstance(first, Wait) and first.message == "A waits (AEven)"
    assert isinstance(second, Wait) and second.message == "B waits (BEven)"


def test_a_filter_that_rejected_no_pod_is_not_asked_for_a_message() -> None:
    quiet = Claimer("Quiet", 9, "nothing-has-this-prefix")
    result = plan(snapshot(decoded_run("r"), (slot("a", ready=False),)), claimers(quiet, base=DEFAULT_REGISTRY))
    assert result == Wait(
        'waiting for available runtime pods for runtime "python"',
        (("RuntimePodAvailability", "RuntimePodUnavailable", 1),),
    )
    assert plan(snapshot(decoded_run("r"), ()), claimers(quiet)) == Wait(
        'waiting for available runtime pods for runtime "python"', ()
    )


def test_each_filter_is_asked_with_its_own_reasons_only_when_another_follows_it() -> None:
    registry = claimers(Claimer("A", 1, "x"), Claimer("B", 5, "y"), Claimer("C", 3, "z"))
    pods = (slot("x1"), slot("x22"), slot("y1"), slot("z1"), slot("z22"))
    result = plan(snapshot(decoded_run("r"), pods), registry)
    assert isinstance(result, Wait) and result.message == "B waits (BEven)"
    result = plan(snapshot(decoded_run("r"), pods[:2] + pods[3:]), registry)
    assert isinstance(result, Wait) and result.message == "C waits (CEven,COdd)"


@final
@dataclass(frozen=True, slots=True)
class FaultyScore:
    """A score plugin whose PreScore fails, or whose NormalizeScore drops the last score."""

    name: ClassVar[str] = "Faulty"
    fast_path: ClassVar[bool] = False
    fail_prepare: bool = False

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodScorer, CycleError]:
        if self.fail_prepare:
            return Failure(CycleError("PluginError", "Faulty could not prepare"))
        return Success(lambda slots: tuple(50 for _ in slots))

    def normalize(self, raw: tuple[int, ...]) -> tuple[int, ...]:
        return raw[:-1]


def test_a_score_plugin_prepare_failure_is_the_cycles_error() -> None:
    snap = snapshot(decoded_run("r"), (slot("p1"), slot("p2")))
    error = plan_cycle(snap, registry_with(FaultyScore(fail_prepare=True))).failure()
    assert error == CycleError("PluginError", "Faulty could not prepare")


def test_a_normalizer_returning_the_wrong_number_of_scores_is_a_plugin_error() -> None:
    snap = snapshot(decoded_run("r"), (slot("p1"), slot("p2")))
    error = plan_cycle(snap, registry_with(FaultyScore())).failure()
    assert error == CycleError("PluginError", 'score plugin "Faulty" returned 1 normalized scores for 2 pods')
