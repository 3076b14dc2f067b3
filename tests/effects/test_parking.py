"""The parking lot keeps each group in queue order through any mix of parks and activations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.effects.parking import LINE_CHUNK, Parking
from kruntimes.pure.model.objects import RunKey
from kruntimes.pure.queueing import ParkReason

REASONS: tuple[ParkReason, ...] = ("capacity", "constraints", "unfit")

operations = st.lists(
    st.tuples(st.booleans(), st.integers(0, 30), st.integers(0, 5), st.sampled_from(REASONS), st.booleans()),
    max_size=80,
)


@pytest.mark.parametrize("line_chunk", [2, 5, LINE_CHUNK])
@given(ops=operations)
def test_the_parked_runs_of_a_group_come_out_merged_in_queue_order(
    line_chunk: int, ops: list[tuple[bool, int, int, ParkReason, bool]],
) -> None:
    """Whatever the chunk size of a group's line: with chunks of 2 or 5 keys, 30 Runs fill many
    chunks, which split as Runs park and empty as they are activated from anywhere in line."""
    parking = Parking(clock=lambda: 0.0, line_chunk=line_chunk)
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


def test_a_backlog_of_several_chunks_is_admitted_from_its_head_in_queue_order() -> None:
    """1,500 Runs parked out of order (three default chunks and more), a few forgotten from the
    middle, then admitted a handful at a time from the head, as admission does."""
    parking = Parking(clock=lambda: 0.0)
    keys = [RunKey("ns", f"r{i:04d}") for i in range(1_500)]
    shuffled = keys[::2] + keys[1::2][::-1]  # every other Run in order, the rest newest first
    for key in shuffled:
        parking.park_unplanned(key, "py", (int(key.name[1:]), "ns", key.name))
    forgotten = set(keys[700:1_500:97])
    for key in forgotten:
        parking.unpark(key)
    admitted: list[RunKey] = []
    while head := parking.parked("ns", "py", ("capacity",), 7):
        admitted.extend(parking.activate(head[:5]))
    assert admitted == [key for key in keys if key not in forgotten]
    assert len(parking) == 0


fit_operations = st.lists(
    st.tuples(st.sampled_from(("park", "activate", "fit")), st.integers(0, 20), st.integers(1, 3), st.sampled_from(REASONS)),
    max_size=80,
)


@given(ops=fit_operations)
def test_a_pod_that_can_hold_runs_parked_unfit_moves_those_and_only_those_to_wait_for_room(
    ops: list[tuple[str, int, int, ParkReason]],
) -> None:
    """Runs ask for one to three slots; a pod of ``size`` slots appears now and then. The Runs
    parked ``unfit`` that it could hold empty join the ``capacity`` line in queue order; the
    others stay ``unfit``, whatever was parked, moved or activated before."""
    parking = Parking(clock=lambda: 0.0, line_chunk=2)
    model: dict[RunKey, tuple[tuple[int, str, str], ParkReason, int]] = {}
    for op, n, size, reason in ops:
        key = RunKey("ns", f"r{n:02d}")
        if op == "park":
            order = (n % 7, "ns", key.name)
            assert parking.park(key, "py", reason, order, requests={"runs": size})
            model[key] = (order, reason, size)
        elif op == "activate":
            assert parking.activate([key]) == ([key] if key in model else [])
            model.pop(key, None)
        else:
            moving = {k for k, (_, r, s) in model.items() if r == "unfit" and s <= size}
            assert parking.fit("ns", "py", {"runs": size}) == len(moving)
            for k in moving:
                model[k] = (model[k][0], "capacity", model[k][2])
    for reason in REASONS:
        expected = sorted((order, key) for key, (order, r, _) in model.items() if r == reason)
        assert parking.parked("ns", "py", (reason,), 256) == tuple(key for _, key in expected)
    assert parking.fit("ns", "py", {}) == 0  # a pod with nothing to offer holds none of them
