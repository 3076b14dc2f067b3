"""The atom: one reference, compare-and-swap, never a lost update."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

from pyrsistent import pvector
from pyrsistent.typing import PVector

import pytest

from kruntimes.kubeclient.atom import Atom

THREADS = 8
SWAPS_PER_THREAD = 2_000


@pytest.fixture(autouse=True)
def frequent_thread_switches() -> Iterator[None]:
    """Make the interpreter switch threads often, so writers really interleave."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def hammer(atom: Atom[PVector[int]], worker: int, start: threading.Barrier) -> None:
    start.wait()
    for i in range(SWAPS_PER_THREAD):
        atom.swap(lambda v: v.append(worker * SWAPS_PER_THREAD + i))


def test_concurrent_swaps_lose_no_update() -> None:
    atom: Atom[PVector[int]] = Atom(pvector())
    start = threading.Barrier(THREADS)
    threads = [threading.Thread(target=hammer, args=(atom, w, start)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    final = atom.get()
    assert len(final) == THREADS * SWAPS_PER_THREAD
    assert sorted(final) == list(range(THREADS * SWAPS_PER_THREAD))


def test_concurrent_swap_with_commits_every_transition_and_returns_what_each_decided() -> None:
    atom = Atom(0)
    start = threading.Barrier(THREADS)
    seen: list[int] = []

    def bump(n: int) -> tuple[int, int]:
        return n + 1, n  # the next value, and the value this transition was decided on

    def worker() -> None:
        start.wait()
        for _ in range(SWAPS_PER_THREAD):
            seen.append(atom.swap_with(bump))

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert atom.get() == THREADS * SWAPS_PER_THREAD
    assert sorted(seen) == list(range(THREADS * SWAPS_PER_THREAD))  # no answer from a lost race


def test_swap_reruns_the_function_when_another_writer_got_in_between() -> None:
    atom = Atom(10)
    calls: list[int] = []

    def interfered(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            atom.reset(100)  # another writer commits while this function runs
        return n + 1

    assert atom.swap(interfered) == 101
    assert calls == [10, 100]


def test_swap_pair_returns_the_value_the_function_saw_and_its_result() -> None:
    atom: Atom[tuple[int, ...]] = Atom((1,))
    old, new = atom.swap_pair(lambda t: t + (2,))
    assert (old, new) == ((1,), (1, 2))
    assert atom.get() is new


def test_compare_and_set_compares_identity_not_equality() -> None:
    first = [1]
    atom = Atom(first)
    assert not atom.compare_and_set([1], [2])
    assert atom.compare_and_set(first, [3])
    assert atom.get() == [3]


def test_reset_returns_the_previous_value() -> None:
    atom = Atom("old")
    assert atom.reset("new") == "old"
    assert atom.get() == "new"
