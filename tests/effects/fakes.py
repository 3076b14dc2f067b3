"""Simulated time for effect-layer tests: a clock that moves only when told, and a sleeper that moves it."""

from __future__ import annotations

import threading


class FakeClock:
    """Seconds on a simulated monotonic clock."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class Spinning(AssertionError):
    """A loop under test slept more often than any test expects of it: it would spin forever."""


class FakeSleeper:
    """A sleeper that records each requested sleep and advances the clock by it instead of waiting.

    Returns ``True`` (stop) once ``stop_after`` sleeps have been taken, so loops end by themselves.
    Past ``limit`` sleeps it raises :class:`Spinning` (and reports stop to whoever catches that):
    a loop that never ends on simulated time fails its test at once rather than hanging it.
    """

    def __init__(self, clock: FakeClock, stop_after: int | None = None, *, limit: int = 10_000) -> None:
        self.clock = clock
        self.sleeps: list[float] = []
        self.stop_after = stop_after
        self.limit = limit
        self.stopped = threading.Event()
        self.spun = False

    def __call__(self, seconds: float) -> bool:
        self.sleeps.append(seconds)
        self.clock.advance(seconds)
        if self.stop_after is not None and len(self.sleeps) >= self.stop_after:
            self.stopped.set()
        if len(self.sleeps) > self.limit:
            self.spun = True
            self.stopped.set()
            raise Spinning(f"slept {len(self.sleeps)} times on simulated time: the loop does not end")
        return self.stopped.is_set()
