"""PreferredRunAffinity and LeastLoaded: raw scores and both normalizers (SPEC §5)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.model.objects import PodSlot, frozen_resources
from kruntimes.pure.framework.interface import normalize_to_max
from kruntimes.pure.plugins.least_loaded import LeastLoaded, group_starts, least_loaded_keys, load_key, rank_scores
from kruntimes.pure.plugins.preferred import PreferredRunAffinity
from kruntimes.pure.plugins.least_loaded import scaled_keys
from kruntimes.pure.model.quantity import Amount
from tests.builders import affinity_json, decoded_run, term
from kruntimes.pure.model.plan import Bind
from tests.pure.planning_world import plan, slot, snapshot, target


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ((), ()),
        ((0, 0, 0), (0, 0, 0)),
        ((2, 0, 1), (100, 0, 50)),
        ((3, 1), (100, 33)),
        ((7,), (100,)),
        ((1, 0, 1), (100, 0, 100)),
        ((200, 199, 1), (100, 99, 0)),
    ],
)
def test_normalize_to_max(raw: tuple[int, ...], expected: tuple[int, ...]) -> None:
    assert normalize_to_max(raw) == expected


def test_preferred_scores_sum_affinity_and_missing_anti_affinity_weights() -> None:
    # SPEC §5: raw = weights of preferred terms with a matching target on the pod + weights of
    # preferred anti-affinity terms with no matching target on it; normalized raw × 100 // max.
    run = decoded_run(
        "r",
        affinity=affinity_json(
            preferred=[(5, term({"app": "db"})), (7, term({"tier": "gold"}))],
            anti_preferred=[(11, term({"noisy": "yes"}))],
        ),
    )
    targets = (
        target("p1", {"app": "db", "tier": "gold"}),
        target("p2", {"app": "db", "noisy": "yes"}),
        target("p4", {"noisy": "yes"}),
    )
    pods = (slot("p1"), slot("p2"), slot("p3"), slot("p4"))
    plugin = PreferredRunAffinity()
    scorer = plugin.prepare(run, snapshot(run, pods, targets)).unwrap()
    raw = scorer(pods)
    assert raw == (5 + 7 + 11, 5, 11, 0)
    assert plugin.normalize(raw) == (100, 5 * 100 // 23, 11 * 100 // 23, 0)


def test_preferred_scorer_without_terms_scores_zero() -> None:
    run = decoded_run("r")
    pods = (slot("p1"), slot("p2"))
    scorer = PreferredRunAffinity().prepare(run, snapshot(run, pods)).unwrap()
    assert PreferredRunAffinity().normalize(scorer(pods)) == (0, 0)


# --- LeastLoaded ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "scores"),
    [
        ([(1, 1)], (100,)),
        ([(1, 1), (2, 2), (3, 3)], (100, 50, 0)),
        ([(3, 3), (1, 1), (2, 2)], (0, 100, 50)),
        ([(1, 1), (1, 1), (2, 2)], (100, 100, 0)),
        ([(1, 1), (2, 2), (2, 2)], (100, 50, 50)),
        ([(1, 1), (2, 2), (3, 3), (4, 4)], (100, 66, 33, 0)),
        ([(5, 5)] * 4, (100, 100, 100, 100)),
        ([(1, 2), (1, 1), (0, 9)], (0, 50, 100)),
    ],
)
def test_least_loaded_rank_table(keys: list[tuple[int, int]], scores: tuple[int, ...]) -> None:
    assert rank_scores(group_starts(keys)) == scores


def test_load_key_is_max_then_sum_of_exact_ratios() -> None:
    capacity = frozen_resources({"runs": 4, "cpu": Fraction(3, 2), "idle": 8, "zero": 0})
    usage = frozen_resources({"runs": 1, "cpu": 0})
    request = frozen_resources({"runs": 1, "cpu": 1})
    assert load_key(capacity, usage, request) == (Fraction(2, 3), Fraction(2, 4) + Fraction(2, 3))


def test_load_key_of_an_idle_pod_is_zero() -> None:
    assert load_key(frozen_resources({"runs": 2}), frozen_resources({}), frozen_resources({"gpu": 1})) == (Fraction(0), Fraction(0))


def test_least_loaded_scores_through_the_plugin() -> None:
    run = decoded_run("r")
    pods = (slot("a", {"runs": "2"}, {"runs": 1}), slot("b", {"runs": "4"}, {"runs": 2}), slot("c", {"runs": "4"}, {"runs": 1}))
    plugin = LeastLoaded()
    scorer = plugin.prepare(run, snapshot(run, pods)).unwrap()
    assert plugin.normalize(scorer(pods)) == (0, 50, 100)


amounts = st.one_of(st.integers(0, 12), st.fractions(min_value=0, max_value=12, max_denominator=8))


@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from(["runs", "cpu", "mem"]), st.one_of(st.integers(-1, 12), st.fractions(0, 12, max_denominator=8)), max_size=3),
            st.dictionaries(st.sampled_from(["runs", "cpu", "mem"]), amounts, max_size=3),
        ),
        min_size=1,
        max_size=8,
    ),
    st.dictionaries(st.sampled_from(["runs", "cpu", "gpu"]), st.integers(0, 3), max_size=3),
)
def test_scaled_keys_order_exactly_like_the_rational_keys(
    pods: list[tuple[dict[str, Amount], dict[str, Amount]]], request: dict[str, int]
) -> None:
    """The fast integer keys give the very same group starts as the reference ``Fraction`` keys."""
    slots = tuple(
        PodSlot(replace(slot(f"p{i}").pod, capacity=frozen_resources(cap)), frozen_resources(use))
        for i, (cap, use) in enumerate(pods)
    )
    req = frozen_resources(request)
    assert group_starts(scaled_keys(slots, req)) == group_starts(least_loaded_keys(slots, req))


def test_scaled_keys_fall_back_to_rationals_when_the_common_scale_is_huge() -> None:
    primes = [p for p in range(1000, 1400) if all(p % d for d in range(2, 38))][:40]
    request = frozen_resources({"runs": 1})
    slots = tuple(
        PodSlot(replace(slot(f"p{i}").pod, capacity=frozen_resources({"runs": prime})), frozen_resources({"runs": i % 5}))
        for i, prime in enumerate(primes)
    )
    assert group_starts(scaled_keys(slots, request)) == group_starts(least_loaded_keys(slots, request))


# --- LeastLoaded against SPEC §5 written out here -------------------------------------------------
# projected = usage + request per resource with capacity > 0, skipped when <= 0; key = (max, sum) of
# the exact ratios projected / capacity, (0, 0) with none; of n pods, a pod with s pods strictly less
# loaded scores (n - 1 - s) * 100 // (n - 1); a lone pod scores 100.


def _key_by_the_spec(capacity: dict[str, Amount], usage: dict[str, Amount], request: dict[str, Amount]) -> tuple[Fraction, Fraction]:
    ratios = [
        Fraction(usage.get(r, 0) + request.get(r, 0)) / Fraction(limit)
        for r, limit in capacity.items()
        if limit > 0 and usage.get(r, 0) + request.get(r, 0) > 0
    ]
    return (max(ratios), sum(ratios, Fraction(0))) if ratios else (Fraction(0), Fraction(0))


def _scores_by_the_spec(keys: list[tuple[Fraction, Fraction]]) -> list[int]:
    n = len(keys)
    if n == 1:
        return [100]
    return [(n - 1 - sum(1 for other in keys if other < key)) * 100 // (n - 1) for key in keys]


def _pod(name: str, capacity: dict[str, Amount], usage: dict[str, Amount]) -> PodSlot:
    return PodSlot(replace(slot(name).pod, capacity=frozen_resources(capacity)), frozen_resources(usage))


def _plugin_scores(pods: list[PodSlot], request: dict[str, Amount]) -> tuple[int, ...]:
    """LeastLoaded's normalized scores of ``pods``, each pod its own unit and through prepare/normalize,
    which must agree."""
    run = replace(decoded_run("r"), requests=frozen_resources(request))
    plugin = LeastLoaded()
    by_units = tuple(plugin.score_units(run, tuple(pods), [1] * len(pods)))
    by_pods = plugin.normalize(plugin.prepare(run, snapshot(run, pods)).unwrap()(tuple(pods)))
    assert by_units == by_pods
    return by_pods


_capacity = st.one_of(st.integers(-1, 12), st.fractions(0, 12, max_denominator=8))
_pods = st.lists(
    st.tuples(
        st.one_of(
            st.builds(lambda c: {"runs": c}, st.integers(1, 9)),  # the common runs-only pod
            st.dictionaries(st.sampled_from(["runs", "cpu", "mem"]), _capacity, max_size=3),
        ),
        st.dictionaries(st.sampled_from(["runs", "cpu", "mem"]), amounts, max_size=3),
        st.integers(1, 3),
    ),
    min_size=1,
    max_size=6,
)
_request = st.one_of(
    st.builds(lambda r: {"runs": r}, st.integers(1, 3)),
    st.dictionaries(st.sampled_from(["runs", "cpu", "gpu"]), st.one_of(st.integers(0, 3), st.fractions(0, 3, max_denominator=4)), max_size=3),
)


@given(_pods, _request)
def test_least_loaded_scores_units_of_alike_pods_as_the_rule_scores_the_pods(
    units: list[tuple[dict[str, Amount], dict[str, Amount], int]], request: dict[str, Amount]
) -> None:
    """A unit stands for ``size`` alike pods: its score is each such pod's score among all the pods."""
    run = replace(decoded_run("r"), requests=frozen_resources(request))
    slots = tuple(_pod(f"u{i}", cap, use) for i, (cap, use, _) in enumerate(units))
    expanded = [_key_by_the_spec(cap, use, request) for cap, use, size in units for _ in range(size)]
    scores = _scores_by_the_spec(expanded)
    firsts = [sum(size for _, _, size in units[:i]) for i in range(len(units))]
    assert list(LeastLoaded().score_units(run, slots, [size for _, _, size in units])) == [scores[i] for i in firsts]
    pods = [_pod(f"p{i}", cap, use) for i, (cap, use, size) in enumerate(units) for _ in range(size)]
    assert list(_plugin_scores(pods, request)) == scores


def test_a_lone_candidate_scores_100() -> None:
    run = decoded_run("r")
    assert list(LeastLoaded().score_units(run, (slot("a", {"runs": "4"}, {"runs": 3}),), [1])) == [100]
    assert _plugin_scores([_pod("a", {"runs": 4}, {"runs": 3})], {"runs": 1}) == (100,)
    # One unit of three alike pods: none is strictly less loaded than another, s = 0.
    assert list(LeastLoaded().score_units(run, (slot("a", {"runs": "4"}, {"runs": 3}),), [3])) == [100]


def test_units_count_every_pod_strictly_less_loaded() -> None:
    """Loads 1/4 (two alike pods), 2/4, 3/4 of runs capacity 4: n = 4, s = 0, 2, 3 →
    3*100//3 = 100, 1*100//3 = 33, 0."""
    run = replace(decoded_run("r"), requests=frozen_resources({"runs": 1}))
    units = (slot("a", {"runs": "4"}, {}), slot("b", {"runs": "4"}, {"runs": 1}), slot("c", {"runs": "4"}, {"runs": 2}))
    assert list(LeastLoaded().score_units(run, units, [2, 1, 1])) == [100, 33, 0]


def test_loads_below_one_compare_by_their_largest_ratio_first() -> None:
    """a: runs 1 of 2.5 and cpu 1 of 2.5 → (2/5, 4/5); b: runs 1 of 1.5 → (2/3, 2/3). a's largest
    ratio is the lower, so a is the less loaded though its sum is the higher."""
    a = _pod("a", {"runs": Fraction(5, 2), "cpu": Fraction(5, 2)}, {"cpu": 1})
    b = _pod("b", {"runs": Fraction(3, 2)}, {})
    assert _plugin_scores([a, b], {"runs": 1}) == (100, 0)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # cpu 100m of 1 and 150m of 1.5 are both 1/10; runs 2 of 4 both 1/2.
        (({"runs": 4, "cpu": 1}, {"runs": 1, "cpu": Fraction(1, 10)}), ({"runs": 4, "cpu": Fraction(3, 2)}, {"runs": 1, "cpu": Fraction(3, 20)})),
        # cpu 30m of 1 and 45m of 1.5 are both 3/100; runs 4 of 5 and 2 of 2.5 both 4/5.
        (({"runs": 5, "cpu": 1}, {"runs": 3, "cpu": Fraction(3, 100)}), ({"runs": Fraction(5, 2), "cpu": Fraction(3, 2)}, {"runs": 1, "cpu": Fraction(9, 200)})),
    ],
)
def test_equal_exact_loads_tie_whatever_the_capacities(
    a: tuple[dict[str, Amount], dict[str, Amount]], b: tuple[dict[str, Amount], dict[str, Amount]]
) -> None:
    """Equal ratios resource by resource make equal keys: both pods score 100."""
    assert _plugin_scores([_pod("a", *a), _pod("b", *b)], {"runs": 1}) == (100, 100)


def test_equal_runs_loads_tie_among_many_different_capacities() -> None:
    """Runs capacities 1..64 (their lcm is far beyond a float's 53 bits): the Run fills the pod with
    capacity 1 and the pod with 2 of 3 runs used alike (1/1 = 3/3), so they score alike; and every
    score is the rule's."""
    pods = [_pod(f"c{c}", {"runs": c}, {}) for c in range(1, 65)]
    pods += [_pod("full-1", {"runs": 1}, {}), _pod("full-3", {"runs": 3}, {"runs": 2})]
    scores = _plugin_scores(pods, {"runs": 1})
    assert scores[-2] == scores[-1] == scores[0]
    keys = [_key_by_the_spec(dict(p.pod.capacity), dict(p.usage), {"runs": 1}) for p in pods]
    assert list(scores) == _scores_by_the_spec(keys)


def test_a_pod_with_another_resource_in_use_counts_its_ratio_even_when_the_run_asks_only_for_runs() -> None:
    """``p1`` uses its one gpu (ratio 1); ``p2`` would use three of its four runs (3/4): ``p2``."""
    run = decoded_run("r", requests={"runs": "1"})
    pods = (slot("p1", {"runs": "4", "gpu": "1"}, {"runs": 1, "gpu": 1}), slot("p2", {"runs": "4"}, {"runs": 2}))
    bound = plan(snapshot(run, pods))
    assert isinstance(bound, Bind) and bound.pod == "p2"
