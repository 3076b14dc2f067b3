"""The scheduler's threads, named for the operating system as well as for Python.

Python names a thread for itself only (CPython sets the OS name from 3.14 on); the kernel's
tools then show every thread of a scheduler as ``kruntimes``. A thread made here also writes its
name to ``/proc/thread-self/comm`` when it starts, so ``top -H -p PID``, ``ps -L -o
tid,comm,time -p PID`` and ``/proc/PID/task/*/{comm,stat}`` tell which of them spends the CPU:
``informer-runs``, ``worker-1-0``, ``event-recorder`` and so on (docs/operations.md, "Which
thread spends the CPU"). The kernel keeps 15 bytes of a name; where ``/proc`` is missing or
read-only the OS name is left as it was, and nothing else changes.

Supervision (docs/reliability.md, "One object, one thread"): a thread made by a
:class:`Supervisor` never dies quietly. An unexpected exception while it handles one object is
the caller's to catch and hand to :meth:`Supervisor.skipped`: logged with the object's key
(``namespace/name``) and no more of it, counted by (thread, stage), and the object skipped. An
exception that reaches the top of a supervised thread means the thread cannot continue:
:meth:`Supervisor.fail` records it, and whoever owns the threads (``runner.Scheduler``) fails its
probes, closes its write gate and lets the process exit non-zero so that it is restarted.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable, Mapping
from typing import Final, Literal, TypeAlias

log = logging.getLogger(__name__)

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


SupervisedThread: TypeAlias = Literal[
    "informer-runs", "informer-pods", "informer-workspaces", "worker", "event-recorder", "control"
]
"""The threads whose per-object failures are counted (every ``worker-T-N`` is ``worker``)."""
Stage: TypeAlias = Literal["decode", "apply", "notify", "cycle", "write", "round"]
"""Where one object's handling raised: an informer's ``decode`` (transform and decoder),
``apply`` (the ClusterState swap) or ``notify`` (the wakeup callback); a worker's ``cycle``; the
event recorder's ``write``; the sharded membership's ``round``."""
SKIPPABLE: Final[tuple[tuple[SupervisedThread, Stage], ...]] = (
    ("informer-runs", "decode"),
    ("informer-runs", "apply"),
    ("informer-runs", "notify"),
    ("informer-pods", "decode"),
    ("informer-pods", "apply"),
    ("informer-pods", "notify"),
    ("informer-workspaces", "decode"),
    ("informer-workspaces", "apply"),
    ("informer-workspaces", "notify"),
    ("worker", "cycle"),
    ("event-recorder", "write"),
    ("control", "round"),
)
"""Every (thread, stage) pair a failure is counted under: the metric's closed label set."""
MAX_KEY_CHARS: Final = 64 + 1 + 253
"""A namespace (63 characters), a slash and a name (253): what a logged key keeps at most."""


def failure_text(error: BaseException) -> str:
    """The exception's type and where it was raised, never its message: a message may quote the
    object being handled (``int()`` quotes the text it refused, ``KeyError`` the key)."""
    frames = "".join(traceback.format_tb(error.__traceback__))
    return f"{type(error).__qualname__} (message withheld)\n{frames}".rstrip()


class Supervisor:
    """The failures of a process's threads: per-object skips counted, a thread's death recorded.

    Thread-safe. ``failure`` names the first thread that could not continue; listeners added with
    :meth:`on_failure` are called once, on the failing thread, right after it is recorded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._skipped: dict[tuple[SupervisedThread, Stage], int] = dict.fromkeys(SKIPPABLE, 0)
        self._failure: str | None = None
        self._failed = threading.Event()
        self._listeners: list[Callable[[str], None]] = []

    def skipped(self, thread: SupervisedThread, stage: Stage, key: str | None, error: BaseException) -> None:
        """One object's handling raised and the object was skipped: count it and log its key
        (``None`` for a step about no one object, such as a membership round)."""
        with self._lock:
            self._skipped[(thread, stage)] = self._skipped.get((thread, stage), 0) + 1
        fields: dict[str, object] = {"thread_kind": thread, "stage": stage}
        if key is not None:
            fields["object"] = key[:MAX_KEY_CHARS]
        fields["error"] = failure_text(error)
        log.error("unexpected error handling one object; skipped it, the thread goes on", extra=fields)

    def skips(self) -> Mapping[tuple[SupervisedThread, Stage], int]:
        """Objects skipped so far, by (thread, stage); every pair of :data:`SKIPPABLE` is present."""
        with self._lock:
            return dict(self._skipped)

    @property
    def failure(self) -> str | None:
        """The name of the first thread that could not continue; ``None`` while all can."""
        return self._failure

    def wait(self, timeout: float | None = None) -> bool:
        """``True`` once a thread has failed (within ``timeout``)."""
        return self._failed.wait(timeout)

    def on_failure(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(thread name)`` when a thread fails (at once if one already has)."""
        with self._lock:
            failed = self._failure
            if failed is None:
                self._listeners.append(listener)
        if failed is not None:
            listener(failed)

    def fail(self, thread: str, error: BaseException) -> None:
        """``thread`` cannot continue: log it, record it, tell the listeners (the first time)."""
        log.critical(
            "a thread cannot continue; this process must be restarted",
            extra={"thread_name": thread, "error": failure_text(error)},
        )
        with self._lock:
            if self._failure is not None:
                return
            self._failure = thread
            listeners = list(self._listeners)
        self._failed.set()
        for listener in listeners:
            try:
                listener(thread)
            except Exception as problem:  # one listener's bug must not keep the others from hearing
                log.critical("a failure listener raised", extra={"error": failure_text(problem)})

    def thread(self, target: Callable[[], object], name: str) -> threading.Thread:
        """A :func:`named_thread` (not started) whose escaping exception is a :meth:`fail`."""

        def supervised() -> None:
            try:
                target()
            except BaseException as error:  # noqa: BLE001 (whatever ends the thread is its failure)
                self.fail(name, error)

        return named_thread(supervised, name)
