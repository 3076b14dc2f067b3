"""Kubernetes quantities are parsed and formatted exactly (SPEC §1 "Quantities")."""

from __future__ import annotations

import decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.model.quantity import (
    MAX_DIGITS,
    Amount,
    Refusal,
    format_quantity,
    parse_nonnegative_integer,
    parse_quantity,
    read_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("0", 0),
        ("500m", Fraction(1, 2)),
        ("2Gi", 2 * 1024**3),
        ("1Ki", 1024),
        ("1e3", 1000),
        ("1E-2", Fraction(1, 100)),
        ("1.5k", 1500),
        (".5", Fraction(1, 2)),
        ("1.", 1),
        ("+3", 3),
        ("-1", -1),
        ("100n", Fraction(1, 10_000_000)),
        ("2M", 2_000_000),
    ],
)
def test_kubernetes_quantities_parse_to_their_exact_value(text: str, value: Amount) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.5.5", "1Ki5", "e3", "k", ".", "1e999", "1 k", "0x10", "1kb"])
def test_text_that_is_not_a_quantity_parses_to_none(text: str) -> None:
    assert parse_quantity(text) is None


def test_whole_values_are_plain_ints_so_the_common_case_stays_fast() -> None:
    assert type(parse_quantity("1.5k")) is int
    assert type(parse_quantity("2000m")) is int


@pytest.mark.parametrize(("text", "value"), [("3", 3), ("1.5k", 1500), ("0", 0), ("2Ki", 2048)])
def test_non_negative_integers_are_accepted_as_requests(text: str, value: int) -> None:
    assert parse_nonnegative_integer(text) == value


@pytest.mark.parametrize("text", ["500m", "-1", "abc", "1.5", ""])
def test_fractions_negatives_and_garbage_are_not_request_integers(text: str) -> None:
    assert parse_nonnegative_integer(text) is None


_SUFFIXES = ["", "m", "k", "M", "G", "n", "u", "Ki", "Mi", "Gi", "e3", "e-2", "E5"]


@st.composite
def quantity_texts(draw: st.DrawFn) -> str:
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.text("0123456789", min_size=0, max_size=12))
    frac = draw(st.none() | st.text("0123456789", min_size=0, max_size=8))
    if not whole and not frac:
        whole = "1"
    number = whole if frac is None else f"{whole}.{frac}"
    return sign + number + draw(st.sampled_from(_SUFFIXES))


@given(quantity_texts())
def test_parse_format_parse_is_the_identity(text: str) -> None:
    value = parse_quantity(text)
    assert value is not None
    assert parse_quantity(format_quantity(value)) == value


@given(st.integers(min_value=-(10**30), max_value=10**30) | st.fractions().filter(lambda f: _terminates(f)))
def test_formatting_any_exact_decimal_reads_back_equal(value: Fraction | int) -> None:
    amount = parse_quantity(format_quantity(value))
    assert amount == value


def _terminates(value: Fraction) -> bool:
    """A finite decimal whose plain form stays within the parser's digit bound."""
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if denominator != 1 or abs(value.numerator) >= 10**40:
        return False
    return len(format_quantity(value).lstrip("-").replace(".", "")) <= MAX_DIGITS


def test_beyond_the_parsers_digit_bound_a_formatted_value_is_refused_not_misread() -> None:
    value = Fraction(1, 2**64)  # 64 decimal places: the plain form has 65 digits
    assert parse_quantity(format_quantity(value)) is None


_DECIMAL_TEXTS = st.builds(
    lambda mantissa, places, exponent: f"{_shift(mantissa, places)}e{exponent}",
    st.integers(min_value=-(10**12), max_value=10**12),
    st.integers(min_value=0, max_value=6),
    st.integers(min_value=-9, max_value=9),
)


def _shift(mantissa: int, places: int) -> str:
    """``mantissa / 10**places`` as decimal text, without floats."""
    digits = str(abs(mantissa)).rjust(places + 1, "0")
    sign = "-" if mantissa < 0 else ""
    if not places:
        return f"{sign}{digits}"
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


@given(st.lists(_DECIMAL_TEXTS, min_size=1, max_size=8))
def test_sums_of_parsed_quantities_equal_the_parse_of_the_exact_decimal_sum(texts: list[str]) -> None:
    context = decimal.Context(prec=200)
    total = decimal.Decimal(0)
    for text in texts:
        total = context.add(total, decimal.Decimal(text))
    parsed = [parse_quantity(text) for text in texts]
    assert all(value is not None for value in parsed)
    assert sum(v for v in parsed if v is not None) == parse_quantity(format(total, "f"))


def test_a_quantity_of_128_characters_is_read_and_one_of_129_is_refused_as_too_long() -> None:
    # SPEC §1 "Limits": a quantity is read when it has at most 128 characters.
    longest = "1e" + "0" * 125 + "5"  # 128 characters, one digit, exponent 5
    assert len(longest) == 128
    assert parse_quantity(longest) == 100_000
    assert read_quantity("1e" + "0" * 126 + "5") is Refusal.TOO_LONG
    assert parse_quantity("1e" + "0" * 126 + "5") is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (1500, "1500"),
        (-3, "-3"),
        (Fraction(1, 2), "0.5"),
        (Fraction(-1, 2), "-0.5"),
        (Fraction(5, 2), "2.5"),
        (Fraction(-21, 4), "-5.25"),
        (Fraction(1, 1000), "0.001"),
        (Fraction(3, 1024), "0.0029296875"),
        (Fraction(4, 2), "2"),
    ],
)
def test_values_are_formatted_as_the_shortest_plain_decimal(value: Amount, text: str) -> None:
    assert format_quantity(value) == text


def test_a_fraction_with_no_finite_decimal_form_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="^1/3 has no finite decimal form$"):
        format_quantity(Fraction(1, 3))
