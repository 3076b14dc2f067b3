"""The client's own limit on its request rate (``--kube-api-qps``, ``--kube-api-burst``).

client-go's token bucket (``flowcontrol.NewTokenBucketRateLimiter``), which kube-scheduler's flags
of the same names set: ``qps`` requests a second on average, ``burst`` back to back after a quiet
spell. Every request the client sends takes one token first, a watch when it is opened; a caller
that finds none waits for its turn. It keeps a scheduler that went wrong (a hot loop of writes)
from flooding the API server; scheduling at its measured peak never waits for it (the defaults are
above that peak: docs/deploy.md, "Client rate limit").

Each caller reserves the next token and then sleeps off its own debt outside the lock, so callers
are served in the order they came and none holds another up while it sleeps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, final

DEFAULT_QPS: Final = 1000.0
DEFAULT_BURST: Final = 2000


@final
class RequestLimiter:
    """``qps`` tokens a second, at most ``burst`` saved; ``qps <= 0`` lets every request through."""

    def __init__(
        self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._qps = qps
        self._burst = float(max(burst, 1))
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = self._burst
        self._at = clock()

    @property
    def qps(self) -> float:
        return self._qps

    @property
    def burst(self) -> int:
        return int(self._burst)

    def take(self) -> float:
        """Wait for this request's token; the seconds waited."""
        if self._qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._qps)
            self._at = now
            self._tokens -= 1.0  # below zero: the callers before this one have taken what is coming
            wait = -self._tokens / self._qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait
