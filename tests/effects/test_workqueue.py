"""The work queue keeps client-go's promises: coalescing, one worker per key, back-off, delays."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
import time
from collections import Counter

import pytest

from kruntimes.effects.queueorder import by_policy
from kruntimes.kubeclient.workqueue import ExponentialDelay, WorkQueue
from kruntimes.pure.model.objects import RunKey
from kruntimes.pure.queueing import FIFO, NAMESPACE_FAIR, QueueEntry, QueueOrder
from tests.effects.fakes import FakeClock


def drain(queue: WorkQueue[str]) -> list[str]:
    taken: list[str] = []
    while (key := queue.try_get()) is not None:
        taken.append(key)
        queue.done(key)
    return taken


def test_a_key_added_twice_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("ns/a")
    queue.add("ns/a")
    assert len(queue) == 1
    assert drain(queue) == ["ns/a"]


def test_keys_come_out_first_activated_first() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    for key in ("ns/c", "ns/a", "ns/b", "ns/a"):
        queue.add(key)
    assert drain(queue) == ["ns/c", "ns/a", "ns/b"]


def test_a_key_being_processed_is_not_handed_to_another_worker() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("ns/a")
    assert queue.try_get() == "ns/a"
    queue.add("ns/a")
    assert queue.try_get() is None
    assert queue.processing() == frozenset({"ns/a"})


def test_a_key_re_added_while_processing_runs_again_after_done_once() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("ns/a")
    key = queue.try_get()
    assert key == "ns/a"
    queue.add("ns/a")
    queue.add("ns/a")
    queue.done(key)
    assert drain(queue) == ["ns/a"]


def test_done_without_a_re_add_does_not_requeue() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add("ns/a")
    key = queue.try_get()
    assert key is not None
    queue.done(key)
    assert queue.try_get() is None


def test_add_after_queues_the_key_when_the_clock_reaches_the_delay() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("ns/a", 30)
    assert queue.try_get() is None
    assert queue.next_due() == clock() + 30
    clock.advance(29.999)
    assert queue.try_get() is None
    clock.advance(0.001)
    assert drain(queue) == ["ns/a"]
    assert queue.next_due() is None


def test_add_after_keeps_the_earlier_due_time() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("ns/a", 10)
    queue.add_after("ns/a", 30)
    clock.advance(10)
    assert drain(queue) == ["ns/a"]
    clock.advance(30)
    assert drain(queue) == []


def test_add_after_moves_a_waiting_key_earlier() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("ns/a", 30)
    queue.add_after("ns/a", 5)
    clock.advance(5)
    assert drain(queue) == ["ns/a"]
    clock.advance(25)
    assert drain(queue) == []


def test_a_non_positive_delay_queues_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.add_after("ns/a", 0)
    assert drain(queue) == ["ns/a"]


def test_a_delayed_key_that_is_already_queued_is_coalesced_when_due() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("ns/a", 1)
    queue.add("ns/a")
    clock.advance(1)
    assert drain(queue) == ["ns/a"]


def test_rate_limited_adds_back_off_exponentially_per_key_until_forgotten() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock, backoff=ExponentialDelay(base=1.0, cap=5.0))
    delays = [queue.add_rate_limited("ns/a") for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert queue.add_rate_limited("ns/b") == 1.0
    assert queue.num_requeues("ns/a") == 5
    queue.forget("ns/a")
    assert queue.num_requeues("ns/a") == 0
    assert queue.add_rate_limited("ns/a") == 1.0


def test_a_rate_limited_key_comes_back_after_its_delay() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock, backoff=ExponentialDelay(base=2.0, cap=60.0))
    queue.add_rate_limited("ns/a")
    clock.advance(1.5)
    assert queue.try_get() is None
    clock.advance(0.5)
    assert queue.try_get() == "ns/a"


def test_the_backoff_never_exceeds_its_cap_even_after_many_failures() -> None:
    assert ExponentialDelay(base=0.005, cap=60.0).delay(10_000) == 60.0


def test_a_custom_order_decides_which_ready_key_goes_first() -> None:
    priority = {"ns/low": 2, "ns/high": 0, "ns/mid": 1}
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock(), order=lambda key, activation: (priority[key], activation))
    for key in ("ns/low", "ns/mid", "ns/high"):
        queue.add(key)
    assert drain(queue) == ["ns/high", "ns/mid", "ns/low"]


CREATED = {
    RunKey("big", "b1"): 1, RunKey("big", "b2"): 2, RunKey("big", "b3"): 3, RunKey("big", "b4"): 4,
    RunKey("small", "s1"): 5, RunKey("small", "s2"): 6, RunKey("tiny", "t1"): 7,
}


def entry(key: RunKey) -> QueueEntry:
    return QueueEntry(key, datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=CREATED[key]))


def taken(queue: WorkQueue[RunKey]) -> list[str]:
    out: list[str] = []
    while (got := queue.try_get()) is not None:
        out.append(got.name)
        queue.done(got)
    return out


def queue_with(policy: QueueOrder) -> WorkQueue[RunKey]:
    order, lane = by_policy(policy, entry)
    queue: WorkQueue[RunKey] = WorkQueue(clock=FakeClock(), order=order, lane=lane)
    for key in reversed(list(CREATED)):  # activated youngest first
        queue.add(key)
    return queue


def test_fifo_serves_the_oldest_run_first_whatever_order_they_were_activated_in() -> None:
    assert taken(queue_with(FIFO)) == ["b1", "b2", "b3", "b4", "s1", "s2", "t1"]


def test_namespace_fair_lets_namespaces_with_ready_runs_take_turns() -> None:
    assert taken(queue_with(NAMESPACE_FAIR)) == ["b1", "s1", "t1", "b2", "s2", "b3", "b4"]


def test_a_run_activated_again_keeps_its_place_in_fifo_order() -> None:
    queue = queue_with(FIFO)
    first = queue.try_get()
    assert first is not None and first.name == "b1"
    queue.done(first)
    queue.add(first)  # re-activated (e.g. its capacity came back): it is still the oldest
    assert taken(queue)[0] == "b1"


def test_shutdown_wakes_a_blocked_worker_with_none() -> None:
    queue: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()))
    worker.start()
    queue.shutdown()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert got == [None]


def test_adds_after_shutdown_are_ignored() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=FakeClock())
    queue.shutdown()
    queue.add("ns/a")
    queue.add_after("ns/b", 1)
    assert queue.try_get() is None
    assert len(queue) == 0


def test_a_blocked_get_wakes_when_a_delayed_key_falls_due_on_the_real_clock() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("ns/a", 0.05)
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()))
    worker.start()
    worker.join(timeout=10)
    assert got == ["ns/a"]


@pytest.mark.parametrize("workers", [4])
def test_many_workers_never_hold_the_same_key_at_once_and_every_add_is_served(workers: int) -> None:
    queue: WorkQueue[int] = WorkQueue()
    holding: set[int] = set()
    guard = threading.Lock()
    overlaps: list[int] = []
    served: Counter[int] = Counter()

    def work() -> None:
        while (key := queue.get()) is not None:
            with guard:
                if key in holding:
                    overlaps.append(key)
                holding.add(key)
            time.sleep(0)  # let other workers run while this key is held
            with guard:
                holding.discard(key)
                served[key] += 1
            queue.done(key)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for round_ in range(200):
        for key in range(10):
            queue.add(key)
    deadline = time.monotonic() + 10
    while (len(queue) or queue.processing()) and time.monotonic() < deadline:
        time.sleep(0.01)
    queue.shutdown()
    for t in threads:
        t.join(timeout=10)
    assert overlaps == []
    assert set(served) == set(range(10))
    assert not queue.processing()
