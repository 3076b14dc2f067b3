"""A blocking token bucket whose budget a caller may share out (the Event writer's rate limit,
like kube-scheduler's event client's)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

MIN_SHARE: Final = 1e-3
"""The least part of the budget a process takes, however small ``share()`` says."""

WAKE_BATCH: Final = 0.1
"""Seconds of writes an empty bucket waits to save before the writer goes on (at least one token,
at most the burst): a writer the rate holds back then wakes once per few writes, not once per
write. At the default 50 a second that is five Events written back to back every 0.1 s; the
rate over any second is the same."""


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved; ``take()`` sleeps until one is there
    (until :data:`WAKE_BATCH` seconds of them are, once it had to wait), or until :meth:`stop`.

    ``share()`` (read at every take, from 0 to 1) scales both: the part of a budget set for the
    whole scheduler that this process may spend (sharded mode: one live replica's part).

    A few lines with an injectable clock and sleep, so tests run on simulated time; a
    rate-limiting package would bring more API than this one blocking call needs.
    """

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None, share: Callable[[], float] = lambda: 1.0,
    ) -> None:
        """``sleep``: by default a wait that :meth:`stop` cuts short (at a low rate a token may
        be minutes away, and a stopping process must not wait for it)."""
        self._rate = rate
        self._burst = float(max(burst, 1))
        self._clock = clock
        self._stopped = threading.Event()
        self._sleep = sleep if sleep is not None else self._stopped.wait
        self._share = share
        self._tokens = self._burst
        self._at = clock()
        self.waiting_until: float | None = None
        """When the sleep under way ends (on ``clock``): nothing is taken before then."""

    def take(self) -> bool:
        """Spend a token: ``True``; ``False`` once :meth:`stop` was called (before or during the sleep)."""
        while not self._stopped.is_set():
            if self._rate <= 0:
                return True
            share = min(1.0, max(self._share(), MIN_SHARE))
            rate, burst = self._rate * share, max(1.0, self._burst * share)
            now = self._clock()
            self._tokens = min(burst, self._tokens + (now - self._at) * rate)
            self._at = now
            if self._tokens >= 1.0 - 1e-9:  # a sleep's float rounding must not cost a wake-up
                self._tokens = max(0.0, self._tokens - 1.0)
                return True
            wanted = min(burst, max(1.0, rate * WAKE_BATCH))
            delay = (wanted - self._tokens) / rate
            self.waiting_until = now + delay
            try:
                self._sleep(delay)
            finally:
                self.waiting_until = None
        return False

    def stop(self) -> None:
        """Every take from now on, and the one sleeping now, returns ``False`` (any thread)."""
        self._stopped.set()

    def resume(self) -> None:
        """Takes spend tokens again (a recorder started anew)."""
        self._stopped.clear()
