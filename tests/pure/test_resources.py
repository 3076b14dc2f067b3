"""The shared capacity predicate ``fits`` and exact resource sums (SPEC §4)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.model.objects import Resources, frozen_resources
from kruntimes.pure.model.quantity import Amount
from kruntimes.pure.model.resources import add, fits, subtract


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
