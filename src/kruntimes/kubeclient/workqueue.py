"""A work queue of keys, with client-go ``workqueue`` semantics.

- A key is queued at most once: adding a key that is already waiting does
  nothing (coalescing).
- A key being processed is never handed to another worker. Adding it while it
  is processed marks it dirty; ``done(key)`` then queues it again, once.
- ``add_after(key, seconds)`` queues the key later (delayed requeue); a key
  already waiting for an earlier time keeps the earlier time.
- ``add_rate_limited(key)`` queues the key after a per-key exponential back-off
  (``base × 2^failures``, capped); ``forget(key)`` resets that key's count.
- ``shutdown()`` wakes every waiting worker; ``get()`` then returns ``None``.

Ordering is an extension point: ready keys are handed out by a *pure* sort key
``order(key, activation) -> comparable`` where ``activation`` is a counter that
grows each time a key becomes ready (a key re-added while queued keeps its
first activation), within *lanes* (``lane(key) -> str``) that take turns,
round robin in lane order. The default is one lane, FIFO by activation.
Ties between equal sort keys fall back to activation. The key and its order are
the caller's types (``effects.queueorder.by_policy`` adapts the scheduler's
``QueueOrder`` policy to this shape).

Time is injected (``clock``: seconds, monotonic), so back-off and delays are
tested on simulated seconds. A blocking ``get()`` waits on a condition for the
time until the next delayed key is due *as the clock says*; with a simulated
clock tests use ``try_get()`` after advancing it.

No library gives these semantics in Python (checked PyPI and the docs index:
``ratelimitqueue`` rate-limits a plain ``queue.Queue`` globally; kopf's queues
are asyncio and per-object streams), so this is written here, after client-go's
``queue.go``, ``delaying_queue.go`` and ``default_rate_limiters.go``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, final


if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

K = TypeVar("K", bound=Hashable)

Clock = Callable[[], float]


def fifo(key: object, activation: int) -> int:
    """The default order: first activated, first out."""
    return activation


class QueueObserver(Protocol):
    """What the queue reports, if given one (client-go's workqueue metrics provider);
    called under the queue's lock, so each must be quick and never call back."""

    def queue_added(self) -> None:
        """A key became waiting (a coalesced add is not one)."""
        ...

    def queue_retried(self) -> None:
        """A key was re-added with back-off."""
        ...

    def queue_waited(self, seconds: float) -> None:
        """A worker took a key that had been ready this long."""
        ...

    def queue_worked(self, seconds: float) -> None:
        """A worker finished a key it held this long."""
        ...


@dataclass(frozen=True, slots=True)
class ExponentialDelay:
    """Per-key exponential back-off for failed keys (client-go ``ItemExponentialFailureRateLimiter``)."""

    base: float = 0.005
    """The first retry's delay: 5 ms, client-go's default, so a transient error costs almost nothing."""
    cap: float = 60.0
    """The longest delay: 60 s, the same ceiling as a Run's own retry back-off (SPEC §3.6), so a
    key that keeps failing is still retried every minute (client-go's 1000 s is too long for a
    scheduler whose Runs wait on it)."""

    def delay(self, failures: int) -> float:
        """The delay before retry number ``failures + 1``."""
        if failures >= 64:  # 2**64 × base is far past any cap; avoid a huge float
            return self.cap
        return min(self.base * (2.0**failures), self.cap)


DEFAULT_BACKOFF = ExponentialDelay()


@final
class WorkQueue(Generic[K]):
    """A coalescing, delaying, rate-limited queue of keys for N worker threads."""

    def __init__(
        self,
        *,
        clock: Clock = time.monotonic,
        order: Callable[[K, int], SupportsRichComparison] = fifo,
        lane: Callable[[K], str] | None = None,
        backoff: ExponentialDelay = DEFAULT_BACKOFF,
        observer: QueueObserver | None = None,
    ) -> None:
        self._clock = clock
        self._observer = observer
        self._ready_since: dict[K, float] = {}
        """With an observer: when each ready key became ready."""
        self._taken_at: dict[K, float] = {}
        """With an observer: when each processing key was handed out."""
        self._order = order
        self._lane = lane
        self._backoff = backoff
        self._cond = threading.Condition(threading.Lock())
        self._ready: dict[str, list[tuple[SupportsRichComparison, int, K]]] = {}
        self._lanes: list[str] = []
        """The lanes with ready keys, sorted."""
        self._last_lane = ""
        self._size = 0
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: list[tuple[float, int, K]] = []  # (due, seq, key); stale entries skipped
        self._due: dict[K, float] = {}  # the live due time of each delayed key
        self._failures: dict[K, int] = {}
        self._activations = 0
        self._seq = 0
        self._shutting_down = False

    # --- adding -------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue ``key`` now, unless it is already queued; if it is being processed, after ``done``."""
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: K, seconds: float) -> None:
        """Queue ``key`` once ``seconds`` have passed on the clock (at once if ``seconds <= 0``)."""
        with self._cond:
            if self._shutting_down:
                return
            if seconds <= 0:
                self._add_locked(key)
                return
            due = self._clock() + seconds
            current = self._due.get(key)
            if current is not None and current <= due:
                return  # already waiting for an earlier time
            self._due[key] = due
            self._seq += 1
            heapq.heappush(self._waiting, (due, self._seq, key))
            self._cond.notify_all()  # a blocked get() may need to wake earlier now

    def add_rate_limited(self, key: K, at_least: float = 0.0) -> float:
        """Queue ``key`` after its back-off (or ``at_least`` seconds, if longer: a server's
        ``Retry-After``) and count one more failure; return the delay used."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            if self._observer is not None:
                self._observer.queue_retried()
        delay = max(self._backoff.delay(failures), at_least)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure backs off from the start again."""
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        """How many failures are counted for ``key`` since it was last forgotten."""
        with self._cond:
            return self._failures.get(key, 0)

    # --- taking -------------------------------------------------------------------

    def get(self) -> K | None:
        """Block until a key is ready and hand it to the caller, or return ``None`` on shutdown.

        The caller owns the key until it calls ``done(key)``.
        """
        with self._cond:
            while True:
                if self._shutting_down:
                    return None
                now = self._clock()
                self._promote_due_locked(now)
                if self._ready:
                    return self._pop_locked()
                timeout = self._waiting[0][0] - now if self._waiting else None
                self._cond.wait(timeout)

    def try_get(self) -> K | None:
        """A ready key (due delayed keys count), or ``None`` at once when none is ready."""
        with self._cond:
            if self._shutting_down:
                return None
            self._promote_due_locked(self._clock())
            if self._ready:
                return self._pop_locked()
            return None

    def done(self, key: K) -> None:
        """The caller finished ``key``; if it was added meanwhile, it is queued again now."""
        with self._cond:
            self._processing.discard(key)
            if self._observer is not None:
                taken = self._taken_at.pop(key, None)
                if taken is not None:
                    self._observer.queue_worked(self._clock() - taken)
            if key in self._dirty:
                self._push_ready_locked(key)

    # --- lifecycle and inspection ----------------------------------------------------

    def shutdown(self) -> None:
        """Stop handing out keys, ignore further adds, and wake every blocked ``get``."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def __len__(self) -> int:
        """Keys ready to be handed out now (not counting delayed or processing keys)."""
        with self._cond:
            return self._size

    def delayed(self) -> int:
        """Keys waiting for a delayed requeue or a back-off."""
        with self._cond:
            return len(self._due)

    def next_due(self) -> float | None:
        """When the earliest delayed key becomes ready, on the clock; ``None`` when none waits."""
        with self._cond:
            self._drop_stale_locked()
            return self._waiting[0][0] if self._waiting else None

    def heads(self) -> list[K]:
        """The first ready key of each lane, every delayed key and every key a worker holds (a
        copy): with an order that puts the oldest first, the oldest key the queue holds is among
        them, and they are few whatever the number of ready keys."""
        with self._cond:
            return [heap[0][2] for heap in self._ready.values()] + list(self._due) + list(self._processing)

    def processing(self) -> frozenset[K]:
        with self._cond:
            return frozenset(self._processing)

    # --- internals (the lock is held) -------------------------------------------------

    def _add_locked(self, key: K) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if self._observer is not None:
            self._observer.queue_added()
        if key in self._processing:
            return  # queued again by done()
        self._push_ready_locked(key)

    def _push_ready_locked(self, key: K) -> None:
        self._activations += 1
        activation = self._activations
        lane = "" if self._lane is None else self._lane(key)
        heap = self._ready.get(lane)
        if heap is None:
            heap = self._ready[lane] = []
            insort(self._lanes, lane)
        heapq.heappush(heap, (self._order(key, activation), activation, key))
        if self._observer is not None:
            self._ready_since[key] = self._clock()
        self._size += 1
        self._cond.notify()

    def _pop_locked(self) -> K:
        lanes = self._lanes
        if len(lanes) == 1:
            lane = lanes[0]
        else:  # the next lane after the last one served, round robin
            at = bisect_right(lanes, self._last_lane)
            lane = lanes[at if at < len(lanes) else 0]
        heap = self._ready[lane]
        _, _, key = heapq.heappop(heap)
        if not heap:
            del self._ready[lane]
            lanes.remove(lane)
        self._last_lane = lane
        self._size -= 1
        self._dirty.discard(key)
        self._processing.add(key)
        observer = self._observer
        if observer is not None:
            now = self._clock()
            since = self._ready_since.pop(key, None)
            if since is not None:
                observer.queue_waited(now - since)
            self._taken_at[key] = now
        return key

    def _drop_stale_locked(self) -> None:
        while self._waiting:
            due, _, key = self._waiting[0]
            if self._due.get(key) == due:
                return
            heapq.heappop(self._waiting)

    def _promote_due_locked(self, now: float) -> None:
        while self._waiting:
            due, _, key = self._waiting[0]
            if self._due.get(key) != due:
                heapq.heappop(self._waiting)  # superseded by an earlier due time
                continue
            if due > now:
                return
            heapq.heappop(self._waiting)
            del self._due[key]
            self._add_locked(key)
