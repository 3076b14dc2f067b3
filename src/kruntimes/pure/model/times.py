"""RFC 3339 times and Go-style durations, parsed and formatted without loss.

Times are timezone-aware UTC ``datetime`` values. Formatting keeps sub-second
precision when there is any, so a logged cycle replays with the same clock.
This is a purely computational module: it never reads the clock.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Final

_DURATION_PART: Final = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_MICROS: Final = {
    "ns": 0.001,
    "us": 1.0,
    "µs": 1.0,
    "μs": 1.0,
    "ms": 1_000.0,
    "s": 1_000_000.0,
    "m": 60_000_000.0,
    "h": 3_600_000_000.0,
}
_MAX_DURATION: Final = timedelta(days=365 * 100)


def parse_time(text: str) -> datetime | None:
    """Parse an RFC 3339 timestamp (``Z`` or an offset; optional fraction) to UTC."""
    if not text or len(text) > 64 or "T" not in text.upper():
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    try:
        return parsed.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        return None


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``; microseconds only when non-zero."""
    utc = value.astimezone(timezone.utc)
    if utc.microsecond:
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_duration(text: str) -> timedelta | None:
    """Parse a Go duration (``500ms``, ``15s``, ``1m30s``, ``-2s``); ``None`` if malformed.

    A bare ``0`` is zero, as in Go. Durations beyond a century are refused.
    """
    if not text or len(text) > 64:
        return None
    sign = 1
    body = text
    if body[0] in "+-":
        sign = -1 if body[0] == "-" else 1
        body = body[1:]
    if body == "0":
        return timedelta(0)
    pos = 0
    micros = 0.0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if match is None:
            return None
        micros += float(match.group(1)) * _UNIT_MICROS[match.group(2)]
        pos = match.end()
    if pos == 0:
        return None
    try:
        result = timedelta(microseconds=sign * micros)
    except OverflowError:
        return None
    if abs(result) > _MAX_DURATION:
        return None
    return result


def format_duration(value: timedelta) -> str:
    """A Go-style duration string that :func:`parse_duration` reads back equal."""
    micros = value // timedelta(microseconds=1)
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    if micros % 1_000_000 == 0:
        return f"{sign}{micros // 1_000_000}s"
    if micros % 1_000 == 0:
        return f"{sign}{micros // 1_000}ms"
    return f"{sign}{micros}us"
