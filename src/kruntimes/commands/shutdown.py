"""Shutdown signals for long-running commands, caught from the first moment of the process.

Importing the Kubernetes client and the rest of the scheduler takes about a second
(more on a loaded machine). A SIGTERM in that window would otherwise kill the
process with the default action (exit -15) although nothing had started: a
rolling update or a supervisor that stops a fresh replica would see a crash.
``cli.main`` therefore calls ``catch_early()`` before it imports any subcommand
when the process runs ``kruntimes scheduler``; the command then takes over with
``install`` and honours a signal that arrived before it was ready.
Only the standard library is imported here, so this costs nothing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Final

SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)

_early = threading.Event()
_early_signal: list[int] = []


def _remember(signum: int, frame: FrameType | None) -> None:
    _early_signal.append(signum)
    _early.set()


def catch_early() -> None:
    """Record SIGTERM/SIGINT from now on (main thread only) until ``install`` replaces the handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        signal.signal(sig, _remember)


def early_signal() -> int | None:
    """The first signal that arrived before ``install``, or ``None``."""
    return _early_signal[0] if _early.is_set() else None


def install(handler: Callable[[int, FrameType | None], None]) -> dict[int, object]:
    """Route SIGTERM/SIGINT to ``handler``; returns the previous handlers (for ``restore``)."""
    previous: dict[int, object] = {}
    for sig in SIGNALS:
        previous[sig] = signal.signal(sig, handler)
    return previous


def restore(previous: dict[int, object]) -> None:
    for sig, handler in previous.items():
        if callable(handler) or isinstance(handler, int):
            signal.signal(sig, handler)
