"""Structured process logs: one JSON object per line in a cluster, readable text on a terminal.

Call sites use the standard library only: ``log.info("bound run", extra={"run": key, "pod": pod})``.
The fields given in ``extra`` become JSON keys (or ``key=value`` pairs in text);
everything else a log line carries is fixed here.

Why no library: structlog and python-json-logger were considered. structlog
would change every call site's API and brings its own processor pipeline for
what is, here, two formatters; python-json-logger is one formatter class, about
the size of ``JsonFormatter`` below, with its own field-renaming conventions.
The stdlib ``logging.Formatter`` subclassed twice costs ~80 lines, no dependency,
and keeps every module (including the effects foundations) on plain ``logging``.

Log lines may name pods and Runs (operators read them); status messages and
Kubernetes Events are where names are restricted, not here.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Final, Literal, TextIO, TypeAlias

LogFormat: TypeAlias = Literal["auto", "json", "text"]
LOG_FORMATS: Final[tuple[LogFormat, ...]] = ("auto", "json", "text")
LOG_LEVELS: Final = ("debug", "info", "warning", "error")

_STANDARD: Final[frozenset[str]] = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def extra_fields(record: logging.LogRecord) -> dict[str, object]:
    """The fields a call site passed in ``extra``, in the order given."""
    return {key: value for key, value in record.__dict__.items() if key not in _STANDARD and not key.startswith("_")}


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return str(value)  # a NamedTuple key such as RunKey prints as "namespace/name"
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return str(value)


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "msg", <extra fields>, "error"}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, object] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            body.setdefault(key, _jsonable(value))
        if record.exc_info:
            body["error"] = self.formatException(record.exc_info)
        elif record.exc_text:
            body["error"] = record.exc_text
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """``2025-01-01T12:00:00.000Z INFO  kruntimes.effects.scheduling: bound run run=ns/r pod=p``."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{key}={_show(value)}" for key, value in extra_fields(record).items())
        line = f"{_timestamp(record)} {record.levelname:<5} {record.name}: {record.getMessage()}"
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def _show(value: object) -> str:
    text = str(value)
    return json.dumps(text) if (not text or any(c in text for c in ' "=')) else text


def resolve_format(fmt: LogFormat, stream: TextIO) -> Literal["json", "text"]:
    """``auto``: text on a terminal, JSON otherwise (a container's stderr is not a TTY)."""
    if fmt != "auto":
        return fmt
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a line is written, not when the handler was made:
    a process that swaps stderr (a test's capture, an embedding program) never leaves a handler
    holding a stream that has since been closed."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        raise AttributeError("writes to sys.stderr")


def configure(fmt: LogFormat = "auto", level: str = "info", stream: TextIO | None = None) -> logging.Handler:
    """Send the root logger to ``stream`` (default: the current ``sys.stderr``) in ``fmt`` at
    ``level``; returns the handler installed.

    Replaces handlers this function installed before, leaves others alone.
    """
    out = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(out) if stream is not None else _Stderr()
    handler.setFormatter(JsonFormatter() if resolve_format(fmt, out) == "json" else TextFormatter())
    setattr(handler, "_kruntimes", True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_kruntimes", False):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # urllib3 logs every retry and pool event at debug/warning; keep it at warning unless debugging.
    logging.getLogger("urllib3").setLevel(logging.DEBUG if level.lower() == "debug" else logging.WARNING)
    return handler
