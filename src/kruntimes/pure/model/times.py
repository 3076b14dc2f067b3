"""RFC 3339 times and Go-style durations, parsed and formatted without loss.

Times are timezone-aware UTC ``datetime`` values. Formatting keeps sub-second
precision when there is any, so a logged cycle replays with the same clock.
This is a purely computational module: it never reads the clock.
"""

from __future__ import annotations

import re
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
_GO_LIMIT_DIGITS: Final = len(str(_GO_LIMIT))
_DIGITS: Final = frozenset("0123456789")

MAX_TIME_LENGTH: Final = 64
"""Characters in a time's text: ``2006-01-02T15:04:05.999999999-07:00`` has 35. Go reads any
number of fraction digits; beyond this the time is refused (SPEC §1, revision 3)."""
MAX_DURATION_LENGTH: Final = 128
"""Characters in a duration's text: ``2562047h47m16.854775807s``, the largest Go holds, has 24.
Go reads any number of leading zeros or fraction digits; beyond this the duration is refused
before any digit is converted (SPEC §1, revision 3)."""

# RFC 3339 exactly as Go's time.Parse reads it with time.RFC3339 or time.RFC3339Nano
# (its parseRFC3339): four-digit year, two-digit fields, hours 00-23, minutes and
# seconds 00-59, an upper-case T, an optional fraction of one or more digits, then Z or
# ±hh:mm within ±23:59. ASCII digits only ([0-9], not \d). The calendar date itself is
# checked by ``fromisoformat``, which reads every text this matches (and more).
_RFC3339: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)


def parse_time(text: str) -> datetime | None:
    """Parse an RFC 3339 timestamp (``Z`` or an offset; optional fraction) to UTC.

    Exactly the texts Go's ``time.Parse(time.RFC3339, …)`` reads in RFC 3339 form, so a
    time the API server or upstream would refuse is refused here too: no ISO 8601
    week or ordinal dates, no basic format, no lower-case ``t`` or ``z``, no missing
    seconds or zone, hours 00–23, seconds 00–59, an offset within ±23:59. The fraction
    is truncated to microseconds. Year 0000, which Python cannot hold, and texts longer
    than :data:`MAX_TIME_LENGTH` are refused.
    """
    if len(text) > MAX_TIME_LENGTH or _RFC3339.fullmatch(text) is None:
        return None
    try:
        return datetime.fromisoformat(text).astimezone(timezone.utc)
    except (OverflowError, ValueError):  # a day the month lacks; a year Python cannot hold
        return None


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``; microseconds only when non-zero; the year in four digits."""
    return value.astimezone(timezone.utc).replace(tzinfo=None).isoformat() + "Z"


def parse_duration(text: str) -> timedelta | None:
    """Parse a Go duration exactly as Go's ``time.ParseDuration`` does; ``None`` where Go errs.

    ``500ms``, ``1m30s``, ``-2s``, ``1.5h``, ``2562047h``; a bare ``0`` (signed or not)
    is zero; a value outside Go's int64-nanosecond range (about ±292 years) is
    refused, as Go refuses it. Go resolves nanoseconds and ``timedelta``
    microseconds: a remainder finer than 1 µs rounds away from zero, so a
    non-zero duration (``1ns``) never becomes zero and never shorter than written.
    A text longer than :data:`MAX_DURATION_LENGTH` is refused unread.
    """
    if not text or len(text) > MAX_DURATION_LENGTH:
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
        if len(whole_digits.lstrip("0")) > _GO_LIMIT_DIGITS:
            return None  # past Go's range whatever the unit; and never more digits than int() takes
        value = (int(whole_digits) if whole_digits else 0) * unit
        if fraction_digits:
            fraction, scale = _leading_fraction(fraction_digits)
            value += int(float(fraction) * (float(unit) / scale))
        total += value  # a segment past the range takes the total past it too
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
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    if micros % 1_000_000 == 0:
        return f"{sign}{micros // 1_000_000}s"
    if micros % 1_000 == 0:
        return f"{sign}{micros // 1_000}ms"
    return f"{sign}{micros}us"
