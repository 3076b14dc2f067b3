"""Queue ordering (SPEC §8, §12): FIFO by activation; a fresh start goes oldest first."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.model.objects import RunKey
from kruntimes.pure.queueing import QueueEntry, QueueOrder, fifo, initial_order
from tests.pure.builders import active_run, at, decoded_run


def test_fifo_serves_keys_in_activation_order_whatever_their_age() -> None:
    entries = [
        QueueEntry(RunKey("default", "young"), activated_seq=1, creation_timestamp=None),
        QueueEntry(RunKey("default", "old"), activated_seq=2),
        QueueEntry(RunKey("a", "first"), activated_seq=0),
    ]
    order: QueueOrder = fifo
    assert [e.key.name for e in sorted(entries, key=order.sort_key)] == ["first", "young", "old"]
    assert order.name == "fifo"


def test_a_fresh_start_activates_pending_runs_oldest_first_then_by_namespace_and_name() -> None:
    runs = [
        decoded_run("b", namespace="y", created=at(-10)),
        decoded_run("a", namespace="y", created=at(-10)),
        decoded_run("z", namespace="x", created=at(-10)),
        decoded_run("oldest", namespace="z", created=at(-100)),
        decoded_run("undated", namespace="a", created=None),
        decoded_run("newest", created=at(0)),
    ]
    assert [str(k) for k in initial_order(runs)] == [
        "z/oldest",
        "x/z",
        "y/a",
        "y/b",
        "default/newest",
        "a/undated",
    ]


def test_only_pending_runs_are_activated_at_start() -> None:
    runs = [
        decoded_run("pending", phase="Pending"),
        decoded_run("empty-phase"),
        active_run("running", "a"),
        decoded_run("done", phase="Succeeded"),
    ]
    assert {k.name for k in initial_order(runs)} == {"pending", "empty-phase"}


def test_names_compare_by_byte_order() -> None:
    runs = [decoded_run(name, created=at(0)) for name in ["b", "B", "a", "é", "Z"]]
    assert [k.name for k in initial_order(runs)] == ["B", "Z", "a", "b", "é"]


@given(st.permutations(list(range(6))))
def test_initial_order_does_not_depend_on_input_order(permutation: list[int]) -> None:
    runs = [decoded_run(f"r{i}", created=at(-(i % 3)) if i != 4 else None) for i in range(6)]
    expected = initial_order(runs)
    assert initial_order([runs[i] for i in permutation]) == expected
