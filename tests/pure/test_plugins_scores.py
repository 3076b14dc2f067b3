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
from tests.pure.planning_world import slot, snapshot, target


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ((), ()),
        ((0, 0, 0), (0, 0, 0)),
        ((2, 0, 1), (100, 0, 50)),
        ((3, 1), (100, 33)),
        ((7,), (100,)),
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
