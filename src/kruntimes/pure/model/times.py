"""RFC 3339 times and Go-style durations, parsed and formatted without loss.

Times are timezone-aware UTC ``datetime`` values. Formatting keeps sub-second
precision when there is any, so a logged cycle replays with the same clock.
This is a purely computational module: it never reads the clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Final

_UNIT_NANOS: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 MICRO SIGN
    "μs": 1_000,  # U+03BC GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_GO_LIMIT: Final = 1 << 63
"""Go holds a duration in int64 nanoseconds: magnitudes up to 2^63 (negative) or 2^63 − 1."""
_DIGITS: Final = frozenset("0123456789")


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
    """Parse a Go duration exactly as Go's ``time.ParseDuration`` does; ``None`` where Go errs.

    ``500ms``, ``1m30s``, ``-2s``, ``1.5h``, ``2562047h``; a bare ``0`` (signed or not)
    is zero; a value outside Go's int64-nanosecond range (about ±292 years) is
    refused, as Go refuses it. Go resolves nanoseconds and ``timedelta``
    microseconds: a remainder finer than 1 µs rounds away from zero, so a
    non-zero duration (``1ns``) never becomes zero and never shorter than written.
    """
    if not text:
        return None
    body = text
    negative = False
    if body[0] in "+-":
        negative = body[0] == "-"
        body = body[1:]
    if body == "0":
        return timedelta(0)
    if not body:
        return None
    nanos = _go_nanoseconds(body)
    if nanos is None or nanos > (_GO_LIMIT if negative else _GO_LIMIT - 1):
        return None
    micros = -(-nanos // 1_000)  # ceiling: see the docstring
    return timedelta(microseconds=-micros if negative else micros)


def _go_nanoseconds(body: str) -> int | None:
    """The unsigned nanoseconds of ``(digits[.digits]unit)+``, or ``None``; Go's algorithm,
    including its float arithmetic for fractions, so results agree to the nanosecond."""
    total = 0
    pos, end = 0, len(body)
    while pos < end:
        start = pos
        while pos < end and body[pos] in _DIGITS:
            pos += 1
        whole_digits = body[start:pos]
        fraction_digits = ""
        if pos < end and body[pos] == ".":
            pos += 1
            fraction_start = pos
            while pos < end and body[pos] in _DIGITS:
                pos += 1
            fraction_digits = body[fraction_start:pos]
        if not whole_digits and not fraction_digits:
            return None
        unit_start = pos
        while pos < end and body[pos] != "." and body[pos] not in _DIGITS:
            pos += 1
        unit = _UNIT_NANOS.get(body[unit_start:pos])
        if unit is None:
            return None
        whole = int(whole_digits) if whole_digits else 0
        if whole > _GO_LIMIT // unit:
            return None
        value = whole * unit
        if fraction_digits:
            fraction, scale = _leading_fraction(fraction_digits)
            if fraction > 0:
                value += int(float(fraction) * (float(unit) / scale))
                if value > _GO_LIMIT:
                    return None
        total += value
        if total > _GO_LIMIT:
            return None
    return total


def _leading_fraction(digits: str) -> tuple[int, float]:
    """Go's ``leadingFraction``: digits past int64 precision are dropped, not an error."""
    fraction, scale = 0, 1.0
    for digit in digits:
        if fraction > (_GO_LIMIT - 1) // 10:
            break
        candidate = fraction * 10 + int(digit)
        if candidate > _GO_LIMIT:
            break
        fraction, scale = candidate, scale * 10
    return fraction, scale


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
