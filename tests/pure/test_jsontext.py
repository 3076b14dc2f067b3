"""``loads`` reads every document as ``json.loads`` does, though most go through ``orjson``.

The reference is ``json.loads`` itself: for each document the two give the same value (the same
``repr``: ``1`` and ``1.0``, ``0.0`` and ``-0.0`` differ), or both refuse it. The documents carry
what ``orjson`` reads differently: integers past 64 bits, ``NaN`` and ``Infinity``, ``1e400``, lone
surrogate escapes, a byte-order mark, and text that is not UTF-8.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from kruntimes.jsontext import dumps
from kruntimes.pure.readers.json import loads

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(codec=None, exclude_categories=()), max_size=8)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)
# number literals as a server could send them, placed as they are into a document
_LITERALS = st.sampled_from([
    "1e400", "-1e400", "1E5", "-0", "-0.0", "0.1", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809", "18446744073709551615", "18446744073709551616", "123456789012345678",
    "1.7976931348623157e308", "5e-324", "2.2250738585072011e-308", "0.30000000000000000444", "NaN",
    "Infinity", "-Infinity", "01", "1.", ".5", "+1",
])


def _outcome(read: Callable[[str | bytes], object], document: str | bytes) -> tuple[str, str]:
    try:
        return ("value", repr(read(document)))
    except ValueError:
        return ("refused", "")


@st.composite
def _documents(draw: st.DrawFn) -> str | bytes:
    value = draw(_VALUES)
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):
        text = "[" + ",".join([text, *draw(st.lists(_LITERALS, max_size=3))]) + "]"
    if draw(st.booleans()):
        text = "\ufeff" + text
    if not draw(st.booleans()):
        return text
    data = text.encode("utf-8", "surrogatepass")
    return data + b"\xff" if draw(st.booleans()) else data


@given(_documents())
def test_every_document_reads_as_json_loads_reads_it(document: str | bytes) -> None:
    assert _outcome(loads, document) == _outcome(json.loads, document)


def test_integers_past_64_bits_stay_exact() -> None:
    assert loads('{"runs": 18446744073709551616, "pods": [-9223372036854775809]}') == {
        "runs": 18446744073709551616, "pods": [-9223372036854775809]}
    assert loads(b'[123456789012345678901234567890]') == [123456789012345678901234567890]


# --- dumps: request bodies ---

_BODY_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.text(st.characters(codec="utf-8", exclude_categories=()), max_size=8)
)
_BODIES = st.recursive(
    _BODY_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@given(_BODIES)
def test_a_body_is_written_as_compact_json_writes_it(value: object) -> None:
    assert dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


_FINITE_VALUES = st.recursive(
    _SCALARS.filter(lambda v: not isinstance(v, float) or math.isfinite(v)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


@given(_FINITE_VALUES)
def test_any_value_json_writes_is_written_as_valid_utf8_that_reads_back(value: object) -> None:
    # past 64 bits, lone surrogates: what orjson refuses is written by json, escaped
    read_back = json.loads(dumps(value).decode("utf-8"))  # strict: a lone surrogate must arrive escaped
    assert json.dumps(read_back) == json.dumps(value)  # compared as text: NaN equals no value


def test_a_float_json_cannot_hold_is_written_as_null() -> None:
    assert dumps({"a": [float("nan"), float("inf"), -float("inf")]}) == b'{"a":[null,null,null]}'
