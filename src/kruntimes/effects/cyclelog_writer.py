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
A single line longer than ``max_bytes`` is still written whole (a file of one line).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Final, TextIO

from kruntimes.pure.readers.cyclelog import CycleRecord, encode_record

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
DEFAULT_BACKUPS: Final = 3


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
        self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self._size = self._file.tell()

    def write(self, record: CycleRecord) -> None:
        """Append one record (encoded outside the lock); errors are counted and logged, never raised."""
        line = encode_record(record) + "\n"
        self.write_line(line)

    def write_line(self, line: str) -> None:
        data_size = len(line.encode("utf-8"))
        with self._lock:
            try:
                if self._closed:
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
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        else:
            self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
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
