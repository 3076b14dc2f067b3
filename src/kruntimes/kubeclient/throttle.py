"""At most one log line per key per interval: the warnings of a loop that may fail every turn."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Throttle:
    """At most one log line per key every ``interval`` seconds (of ``clock``); thread-safe.

    ``allow(key)`` answers how many lines were held back for that key since the last one
    allowed, or ``None`` when this one is held back too.
    """

    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def allow(self, key: str = "") -> int | None:
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)
