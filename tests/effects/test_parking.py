"""The parking lot keeps each group in queue order through any mix of parks and activations."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kruntimes.effects.parking import Parking
from kruntimes.pure.model.objects import RunKey
from kruntimes.pure.queueing import ParkReason

REASONS: tuple[ParkReason, ...] = ("capacity", "constraints", "unfit")

operations = st.lists(
    st.tuples(st.booleans(), st.integers(0, 30), st.integers(0, 5), st.sampled_from(REASONS), st.booleans()),
    max_size=80,
)


@given(operations)
def test_the_parked_runs_of_a_group_come_out_merged_in_queue_order(
    ops: list[tuple[bool, int, int, ParkReason, bool]],
) -> None:
    parking = Parking(clock=lambda: 0.0)
    model: dict[RunKey, tuple[tuple[int, str, str], ParkReason]] = {}
    for park, n, second, reason, own in ops:
        key = RunKey("ns", f"r{n:02d}")
        if park:
            # the built-in policies' sort key ends in the Run's own key; a library policy's may not
            order = (second, "ns", key.name) if own else (second, "lane", key.name[::-1])
            if reason == "capacity":
                parking.park_unplanned(key, "py", order)
            else:
                assert parking.park(key, "py", reason, order)
            model[key] = (order, reason)
        else:
            assert parking.activate([key]) == ([key] if key in model else [])
            model.pop(key, None)
    for reasons in (REASONS, ("capacity", "constraints"), ("unfit",)):
        expected = sorted((order, key) for key, (order, reason) in model.items() if reason in reasons)
        assert parking.parked("ns", "py", reasons, 256) == tuple(key for _, key in expected)
        assert parking.parked("ns", "py", reasons, 3) == tuple(key for _, key in expected[:3])
    assert len(parking) == len(model)
    assert parking.counts() == {r: n for r in REASONS if (n := sum(1 for _, rr in model.values() if rr == r))}
