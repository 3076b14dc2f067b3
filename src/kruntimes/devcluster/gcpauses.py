"""Short collector pauses for a process that holds a large, growing heap of JSON objects.

The dev cluster keeps every object, and its write history, as plain dicts and lists: after a
few thousand Runtime Pods and Runs that is millions of tracked objects, and every full
collection of CPython's cycle detector walks all of them, for far longer than the scheduler's
own collections (docs/performance.md, "Design measurements"). A real API server's collector
runs concurrently and barely pauses, so those pauses are not the scheduler's, yet every
schedule latency the benchmarks report would pass through them.

:func:`shorten_pauses` moves whatever survives a full collection to the permanent generation
(``gc.freeze``), so the next one walks only what arrived since. Parsed JSON forms no
reference cycles (dicts, lists and strings freed by reference counting as usual, frozen or
not), so freezing keeps no garbage alive in practice; a cycle among frozen objects would be
kept, a price only a long-lived process with cyclic garbage pays. Call it in the standalone
server and in benchmark drivers, never in a library user's process (it is process-wide).

:func:`quick_turns` is the same kind of fix for the interpreter lock. The server's simulator
writes heartbeats in waves (each a full status write), and while such a wave runs, a request
thread that gave up the lock for its socket waits up to CPython's switch interval at every turn
to get it back, which adds up over a request. A real API server serves requests on many cores.
"""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any, Final

__all__ = ["SWITCH_INTERVAL", "quick_turns", "shorten_pauses"]

SWITCH_INTERVAL: Final = 0.0005
"""The standalone server's switch interval, in seconds (CPython's default is 0.005)."""

_installed = False
_lock = threading.Lock()


def _freeze_after_full_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def shorten_pauses() -> bool:
    """Freeze the survivors of every full collection from now on (once per process); ``True``
    the first time it is installed."""
    global _installed
    with _lock:
        if _installed:
            return False
        gc.callbacks.append(_freeze_after_full_collection)
        _installed = True
        return True


def quick_turns() -> None:
    """Hand the interpreter lock between threads every :data:`SWITCH_INTERVAL` (process-wide)."""
    sys.setswitchinterval(SWITCH_INTERVAL)
