"""The cycle log file: one ``CycleRecord`` per line, size-bounded with numbered backups.

``kruntimes replay FILE`` re-plans every line. Lines come from N worker threads;
one lock serialises them so a line is never interleaved with another, and each
line is flushed as it is written (a crash loses at most the line being written,
and ``replay`` can read a live file).

Rotation follows ``logging.handlers.RotatingFileHandler``: before a line that would
take the file past ``max_bytes``, ``FILE.N-1`` becomes ``FILE.N`` … ``FILE`` becomes
``FILE.1`` and a new ``FILE`` starts; the oldest beyond ``backups`` is deleted.
The handler itself is not used because (1) with ``backupCount=0`` it never rotates
(the file grows without bound; here it is truncated instead, so the bound always
holds), (2) write errors go to ``logging``'s ``handleError`` (a traceback on stderr
per line) rather than to the caller, who must count and rate-limit them, and
(3) it wants ``LogRecord``s; the whole writer is a few lines of its own.

No line it writes is longer than ``max_bytes``, so no file it writes is, and the log
holds at most ``(backups + 1) × max_bytes`` (a file left larger under an earlier, larger
budget rotates away at the first line and ages out). A record whose line would be longer (a cycle over
thousands of pods) is written as its truncation marker (``encode_truncated``: the Run's
key, the action, the size), which ``kruntimes replay`` reports as not replayable; a line
that cannot fit even so (a budget of a few hundred bytes) is not written. Both are
counted and logged.

The log holds Run labels, affinity and pod names: every file it creates (the
log, and the new file after a rotation; backups are the same files renamed)
is created mode 0600, whatever the umask. A file that already exists keeps its
mode (an operator may have widened it on purpose).

The defaults bound the log at (3 + 1) × 8 MiB = 32 MiB: half of the 64 Mi
emptyDir the shipped Deployment mounts at ``/tmp`` (its root filesystem is
read-only), leaving the other half to the rest of ``/tmp``. A log that outgrew
the emptyDir's ``sizeLimit`` would get the pod evicted.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Final, TextIO

from kruntimes.pure.readers.cyclelog import CycleRecord, encode_record, encode_truncated

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES: Final = 8 * 1024 * 1024
DEFAULT_BACKUPS: Final = 3
FILE_MODE: Final = 0o600


def _create_or_append(path: Path, *, truncate: bool = False) -> TextIO:
    """Open ``path`` for appending (or truncated); a file this creates is mode 0600 exactly."""
    flags = os.O_WRONLY | (os.O_TRUNC if truncate else os.O_APPEND) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        descriptor = os.open(path, flags)
    else:
        try:
            os.fchmod(descriptor, FILE_MODE)  # the umask may have narrowed it further (0400 is unwritable)
        except OSError:
            os.close(descriptor)
            raise
    return open(descriptor, "a", encoding="utf-8")  # noqa: SIM115 (the caller closes it)


def unwritable(path: str | Path) -> str | None:
    """Why the cycle log cannot be written at ``path``, in one line; ``None`` when it can.

    Checked at start-up, before the replica campaigns or leads, by doing what
    the writer will do (create the directory, open the file for appending,
    creating it mode 0600): a read-only root filesystem, a missing permission
    or a file in the way is an operator's mistake to report at once, in words,
    rather than a traceback.
    """
    target = Path(path)
    if target.is_dir():
        return f"cannot write {target}: it is a directory"
    parent = target.parent
    ancestor = parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"cannot create the directory {parent}: {ancestor} is a file"
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as problem:
        return f"cannot create the directory {parent}: {problem.strerror or problem}"
    try:
        _create_or_append(target).close()
    except OSError as problem:
        return f"cannot write {target}: {problem.strerror or problem}"
    return None


class CycleLogWriter:
    """Append encoded cycle records to ``path``, rotating by size. Thread-safe."""

    def __init__(self, path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES, backups: int = DEFAULT_BACKUPS) -> None:
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        if backups < 0:
            raise ValueError("backups must not be negative")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        self._size = 0
        self._closed = False
        self.errors = 0
        """Lines that could not be written (logged, never raised to a cycle)."""
        self.written = 0
        self.truncated = 0
        """Records written as their truncation marker: their line was longer than ``max_bytes``."""
        self.dropped = 0
        """Lines not written at all: longer than ``max_bytes`` even as a marker."""
        self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = _create_or_append(self.path)  # closed by close()
        self._size = self._file.tell()

    def write(self, record: CycleRecord) -> None:
        """Append one record (encoded outside the lock), or its truncation marker when its line is
        longer than ``max_bytes``; errors are counted and logged, never raised."""
        line = encode_record(record) + "\n"
        size = len(line)  # ASCII only: characters are bytes
        if size > self.max_bytes:
            line = encode_truncated(record, size) + "\n"
            with self._lock:
                self.truncated += 1
                truncated = self.truncated
            if truncated == 1 or truncated % 1000 == 0:
                log.warning(
                    "a cycle record is larger than the cycle log's max bytes: written as a marker, not replayable",
                    extra={"path": str(self.path), "bytes": size, "max_bytes": self.max_bytes, "truncated": truncated},
                )
        self.write_line(line)

    def write_line(self, line: str) -> None:
        """Append one line (ending in a newline); one longer than ``max_bytes`` is counted in
        ``dropped`` and not written, so that no file outgrows its budget."""
        data_size = len(line.encode("utf-8"))
        with self._lock:
            try:
                if self._closed:
                    return
                if data_size > self.max_bytes:
                    self.dropped += 1
                    if self.dropped == 1 or self.dropped % 1000 == 0:
                        log.error(
                            "a cycle log line does not fit the cycle log's max bytes: not written",
                            extra={"path": str(self.path), "bytes": data_size, "max_bytes": self.max_bytes, "dropped": self.dropped},
                        )
                    return
                if self._file is None:  # a rotation failed half-way: start a fresh file
                    self._open()
                    assert self._file is not None
                if self._size > 0 and self._size + data_size > self.max_bytes:
                    self._rotate()
                self._file.write(line)
                self._file.flush()
                self._size += data_size
                self.written += 1
            except OSError as problem:
                self.errors += 1
                if self.errors == 1 or self.errors % 1000 == 0:
                    log.error("cannot write the cycle log", extra={"path": str(self.path), "error": str(problem), "errors": self.errors})

    def _rotate(self) -> None:
        assert self._file is not None
        self._file.close()
        self._file = None
        if self.backups > 0:
            for index in range(self.backups - 1, 0, -1):
                source = self._backup(index)
                if source.exists():
                    os.replace(source, self._backup(index + 1))
            os.replace(self.path, self._backup(1))
            self._file = _create_or_append(self.path)
        else:
            self._file = _create_or_append(self.path, truncate=True)
        self._size = 0

    def _backup(self, index: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{index}")

    def files(self) -> tuple[Path, ...]:
        """The current file and its existing backups, oldest first (replay order)."""
        backups = [self._backup(i) for i in range(self.backups, 0, -1) if self._backup(i).exists()]
        return tuple(backups) + ((self.path,) if self.path.exists() else ())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None
