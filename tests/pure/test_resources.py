"""The shared capacity predicate ``fits`` and exact resource sums (SPEC §4)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.model.objects import Resources, frozen_resources
from kruntimes.pure.model.quantity import Amount
from kruntimes.pure.model.resources import add, fits, plus_reserved, subtract


def r(**amounts: Amount) -> Resources:
    return frozen_resources(amounts)


@pytest.mark.parametrize(
    ("capacity", "usage", "asked", "expected"),
    [
        (r(runs=2), r(), r(runs=1), True),
        (r(runs=2), r(runs=1), r(runs=1), True),
        (r(runs=2), r(runs=2), r(runs=1), False),
        (r(runs=2, cpu=4), r(runs=1, cpu=3), r(runs=1, cpu=1), True),
        (r(runs=2, cpu=4), r(runs=1, cpu=3), r(runs=1, cpu=2), False),
        (r(runs=2), r(), r(runs=1, cpu=1), False),
        (r(runs=2), r(), r(runs=1, cpu=0), True),
        (r(runs=2), r(), r(cpu=0, runs=3), False),
        (r(runs=2), r(), r(cpu=-1, runs=3), False),
        (r(runs=2, cpu=Fraction(3, 2)), r(cpu=Fraction(1, 2)), r(runs=1, cpu=1), True),
        (r(runs=2), r(cpu=100), r(runs=1), True),
    ],
    ids=[
        "empty pod",
        "equality fits",
        "full",
        "every resource fits",
        "one resource over",
        "unadvertised resource never fits",
        "zero request asks for nothing",
        "a zero request does not excuse the others",
        "a negative request does not excuse the others",
        "exact fractions",
        "usage of unrequested resources is irrelevant",
    ],
)
def test_fits(capacity: Resources, usage: Resources, asked: Resources, expected: bool) -> None:
    assert fits(capacity, usage, asked) is expected


NAMES = ["runs", "cpu", "memory"]
amounts = st.integers(min_value=0, max_value=20) | st.fractions(min_value=0, max_value=20, max_denominator=8)
resources_st = st.dictionaries(st.sampled_from(NAMES), amounts).map(frozen_resources)


@given(resources_st, resources_st, resources_st, st.data())
def test_fits_is_monotone_in_usage(
    capacity: Resources, usage: Resources, request: Resources, data: st.DataObject
) -> None:
    less = frozen_resources({name: data.draw(st.fractions(0, 1)) * amount for name, amount in usage.items()})
    if fits(capacity, usage, request):
        assert fits(capacity, less, request)


@given(resources_st, resources_st)
def test_add_then_subtract_is_the_identity_without_zero_entries(a: Resources, b: Resources) -> None:
    total = add(a, b)
    assert all(total.values())
    assert dict(subtract(total, b)) == {name: amount for name, amount in a.items() if amount}
    assert add(a, b) == add(b, a)


signed_amounts = st.integers(min_value=-3, max_value=20) | st.fractions(min_value=-3, max_value=20, max_denominator=8)
signed_resources_st = st.dictionaries(st.sampled_from(NAMES), signed_amounts).map(frozen_resources)


@given(resources_st, resources_st, signed_resources_st)
def test_fits_is_the_spec_rule(capacity: Resources, usage: Resources, request: Resources) -> None:
    # SPEC §4: for every requested resource > 0 the pod advertises it and usage + request <= capacity.
    rule = all(
        name in capacity and usage.get(name, 0) + amount <= capacity[name]
        for name, amount in request.items()
        if amount > 0
    )
    assert fits(capacity, usage, request) is rule


def _sum_without_zeros(a: Mapping[str, Amount], b: Mapping[str, Amount]) -> dict[str, Amount]:
    names = set(a) | set(b)
    sums = {name: a.get(name, 0) + b.get(name, 0) for name in names}
    return {name: amount for name, amount in sums.items() if amount != 0}


@pytest.mark.parametrize(
    ("usage", "extra", "expected"),
    [
        (r(runs=1), {"runs": 2}, {"runs": 3}),
        (r(runs=1), {"cpu": 0}, {"runs": 1}),
        (r(runs=1, cpu=2), {"cpu": 0, "memory": 0}, {"runs": 1, "cpu": 2}),
        (r(cpu=2), {"runs": 1, "memory": 0}, {"runs": 1, "cpu": 2}),
        (r(), {"cpu": 0}, {}),
        (r(runs=1), {"runs": -1}, {}),
        ({"runs": 1}, {"runs": 1, "cpu": 0}, {"runs": 2}),
    ],
    ids=[
        "reserved runs add to usage",
        "a zero reservation leaves usage as it is",
        "zero reservations of other resources are dropped, the rest kept",
        "a zero reservation beside a real one",
        "nothing used and nothing reserved",
        "a total of zero is dropped",
        "usage given as a plain map",
    ],
)
def test_plus_reserved_is_the_sum_with_zero_entries_dropped(
    usage: Resources, extra: dict[str, Amount], expected: dict[str, Amount]
) -> None:
    assert dict(plus_reserved(usage, extra)) == expected


@given(resources_st | st.dictionaries(st.sampled_from(NAMES), amounts), st.dictionaries(st.sampled_from(NAMES), amounts))
def test_plus_reserved_equals_the_exact_sum(usage: Resources, extra: dict[str, Amount]) -> None:
    total = plus_reserved(usage, extra)
    assert dict(total) == _sum_without_zeros(usage, extra)
    assert dict(total) == dict(add(usage, frozen_resources(extra)))
