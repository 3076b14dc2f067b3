"""Exact Kubernetes quantities (``1``, ``500m``, ``2Gi``, ``1e3``, ``1.5k``).

Values are ``int`` when whole and ``Fraction`` otherwise, so that every sum and
comparison the scheduler makes is exact and the common whole-number case stays
as fast as Python integers. This is a purely computational module.
"""

from __future__ import annotations

import re
from enum import Enum
from fractions import Fraction
from typing import Final, TypeAlias

Amount: TypeAlias = int | Fraction
"""An exact quantity value; always normalised by :func:`normalize`."""

_BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

_QUANTITY: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))"
)

# Bounds that keep a hostile quantity ("1e999999999", a 5,000-digit exponent) from
# costing unbounded memory or time, and from reaching ``int()`` with more digits than
# Python converts (4,300): the length is checked before anything is converted. Real
# capacities and requests are nowhere near them (docs/spec.md, "Limits").
MAX_LENGTH: Final = 128
"""Characters in a quantity's text."""
MAX_DIGITS: Final = 64
"""Digits in its number, before any suffix or exponent."""
MAX_EXPONENT: Final = 64
"""Magnitude of its decimal exponent (``1e64`` is read, ``1e65`` is refused)."""
BOUNDS: Final = (
    f"a quantity is read when it has at most {MAX_LENGTH} characters, {MAX_DIGITS} digits "
    f"and an exponent within ±{MAX_EXPONENT}"
)


class Refusal(Enum):
    """Why a text is not read as a quantity. All but ``MALFORMED`` are the scheduler's own
    bounds on a text the Kubernetes grammar accepts (SPEC §1, revision 3)."""

    MALFORMED = "is not a quantity"
    TOO_LONG = f"is longer than {MAX_LENGTH} characters"
    TOO_MANY_DIGITS = f"has more than {MAX_DIGITS} digits"
    EXPONENT_OUT_OF_RANGE = f"has an exponent beyond ±{MAX_EXPONENT}"

    @property
    def beyond_bounds(self) -> bool:
        return self is not Refusal.MALFORMED


def normalize(value: Amount) -> Amount:
    """Return ``value`` as an ``int`` when it is whole."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return value.numerator
    return value


def parse_quantity(text: str) -> Amount | None:
    """Parse a Kubernetes quantity exactly; ``None`` when it is not one or is beyond the bounds.

    Accepts the Kubernetes grammar: an optional sign, a decimal number, and one
    of a binary suffix (``Ki``..``Ei``), a decimal suffix (``n u m k M G T P E``)
    or a decimal exponent (``e3``, ``E-2``). :func:`read_quantity` says why not.
    """
    value = read_quantity(text)
    return None if isinstance(value, Refusal) else value


def read_quantity(text: str) -> Amount | Refusal:
    """:func:`parse_quantity`, with the reason for a refusal; never raises, whatever the text."""
    if len(text) > MAX_LENGTH:
        return Refusal.TOO_LONG
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return Refusal.MALFORMED
    whole = match.group("int")
    frac = match.group("frac") or ""
    if not whole and not frac:
        return Refusal.MALFORMED
    if len(whole) + len(frac) > MAX_DIGITS:
        return Refusal.TOO_MANY_DIGITS
    mantissa = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
    binary = match.group("binary")
    exp_text = match.group("exp")
    if binary is not None:
        value = mantissa * (1024 ** _BINARY[binary])
    elif exp_text is not None:
        exponent = int(exp_text[1:])  # at most MAX_LENGTH digits: far below Python's limit
        if abs(exponent) > MAX_EXPONENT:
            return Refusal.EXPONENT_OUT_OF_RANGE
        value = mantissa * Fraction(10) ** exponent
    else:
        value = mantissa * Fraction(10) ** _DECIMAL[match.group("decimal") or ""]
    if match.group("sign") == "-":
        value = -value
    return normalize(value)


def format_quantity(value: Amount) -> str:
    """Format an exact value so that :func:`parse_quantity` reads it back equal.

    Whole values print as integers; others as a plain decimal fraction (values
    parsed from quantities always have a terminating decimal expansion).
    """
    value = normalize(value)
    if isinstance(value, int):
        return str(value)
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    places = 0
    while (magnitude * 10**places).denominator != 1:
        places += 1
        if places > 4 * MAX_DIGITS:
            raise ValueError(f"{value} has no finite decimal form")
    scaled = (magnitude * 10**places).numerator
    digits = str(scaled).rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def parse_nonnegative_integer(text: str) -> int | None:
    """A quantity whose value is a whole number >= 0 (``3``, ``1.5k``); else ``None``."""
    value = parse_quantity(text)
    if isinstance(value, int) and value >= 0:
        return value
    return None
