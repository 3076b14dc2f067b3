"""The scheduler's threads, named for the operating system as well as for Python.

Python names a thread for itself only (CPython sets the OS name from 3.14 on); the kernel's
tools then show every thread of a scheduler as ``kruntimes``. A thread made here also writes its
name to ``/proc/thread-self/comm`` when it starts, so ``top -H -p PID``, ``ps -L -o
tid,comm,time -p PID`` and ``/proc/PID/task/*/{comm,stat}`` tell which of them spends the CPU:
``informer-runs``, ``worker-1-0``, ``event-recorder`` and so on (docs/operations.md, "Which
thread spends the CPU"). The kernel keeps 15 bytes of a name; where ``/proc`` is missing or
read-only the OS name is left as it was, and nothing else changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

OS_NAME_BYTES: Final = 15
"""What the kernel keeps of a thread's name (``TASK_COMM_LEN`` less its terminating zero)."""


def name_os_thread(name: str) -> bool:
    """Give the calling thread ``name`` (its first 15 bytes) in the operating system; ``False``
    where that cannot be done (no ``/proc``, another OS)."""
    try:
        with open("/proc/thread-self/comm", "wb") as comm:
            comm.write(name.encode("ascii", "replace")[:OS_NAME_BYTES])
    except OSError:
        return False
    return True


def named_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """A daemon thread (not started) called ``name`` in Python and in the operating system."""

    def run() -> None:
        name_os_thread(name)
        target()

    return threading.Thread(target=run, name=name, daemon=True)
