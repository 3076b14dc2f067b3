"""Decoding JSON text totally: :func:`loads` is ``json.loads`` made total on what a server or a
file can hold (an integer literal of any length, nesting of any depth); :func:`dumps` writes the
compact UTF-8 text of a request body.

A leaf module, importing nothing of kruntimes, because two layers need the same contract:
the pure readers (``pure.readers.json`` re-exports it) and the Kubernetes client
(``kubeclient.kube``), which imports nothing of the scheduler. A purely computational module.

Every watch event, list and answer the scheduler reads passes through :func:`loads`, so its
common case is parsed by ``orjson`` (about a third of ``json.loads``'s CPU on a Run). ``orjson``
answers differently from ``json.loads`` on a few documents: an integer past 64 bits becomes a
float, and ``NaN``, ``1e400``, a lone surrogate escape or a byte-order mark are refused. A
document with a run of 19 or more digits, or one ``orjson`` refuses, is read by ``json.loads``
as before, so every document decodes to exactly what ``json.loads`` gives.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final

import orjson


@dataclass(frozen=True, slots=True)
class OverlongNumber:
    """An integer literal with more digits than Python turns into an ``int``
    (``sys.get_int_max_str_digits()``: 4,300 unless changed), kept as its length.

    ``int()`` raises ``ValueError`` on such a literal, and so does ``json.loads`` on a
    document holding one: one hostile number would make a whole list unreadable. Kept
    as this value instead, it is a value of no type any reader accepts, so the field
    holding it is malformed like any field of a wrong type: a Run's request is invalid
    (SPEC §1, revision 3), an unread field is ignored, a strict reader names the field.
    """

    digits: int


def bounded_int(text: str) -> int | OverlongNumber:
    """``int(text)`` for the digits of an integer literal; :class:`OverlongNumber` past Python's limit."""
    try:
        return int(text)
    except ValueError:  # the literal's syntax is the caller's (a JSON or YAML scanner): only its length
        return OverlongNumber(len(text.lstrip("+-")))


MAX_DEPTH: Final = 512
"""Levels of arrays and objects read in a document deeper than Python's recursion allows
(``json.loads`` raises ``RecursionError`` just under 1,000 levels): a value nested deeper
is read as ``null``. No field any reader reads is nested a tenth as deep."""

# Where orjson and json.loads could read a number differently: 19 digits can exceed a signed
# 64-bit integer (orjson turns a longer one into a float). Digits inside strings match too: harmless.
# Bytes are checked by mapping every digit to "0" and looking for 19 of them in a row: both steps
# run in C, several times faster than a regular expression over the same bytes.
_LONG_DIGITS: Final = re.compile(r"[0-9]{19}")
_DIGITS_TO_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")
_NINETEEN_ZEROS: Final = b"0" * 19

# A JSON string (escapes included) or one bracket: what the depth of a document is made of.
_STRUCTURE: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def loads(data: str | bytes) -> object:
    """``json.loads`` that no JSON document makes raise anything but a ``ValueError`` for invalid JSON.

    An integer literal longer than Python converts decodes to :class:`OverlongNumber`
    (rather than failing the whole document), and a value nested deeper than Python's
    recursion allows to ``null`` (past :data:`MAX_DEPTH` levels; rather than a
    ``RecursionError``): one hostile object in a list leaves the others readable. The
    common document is read by ``orjson`` (module docstring); the rest runs only after
    ``json.loads`` refused.
    """
    if isinstance(data, bytes):
        long_digits = _NINETEEN_ZEROS in data.translate(_DIGITS_TO_ZERO)
    else:
        long_digits = _LONG_DIGITS.search(data) is not None
    if not long_digits:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # json.loads decides: it reads some documents orjson refuses, and says why for the rest
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer literal past Python's digit limit (or undecodable bytes, raised again)
        return _loads_bounded(data)
    except RecursionError:
        text = data if isinstance(data, str) else data.decode(json.detect_encoding(data), "surrogatepass")
        return _loads_bounded(_cut_deeper_than(text, MAX_DEPTH))


def dumps(value: object) -> bytes:
    """Compact JSON in UTF-8, exactly ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``
    encoded, for the values a request body holds (strings, integers, booleans, ``null``, lists and
    objects keyed by strings); written by ``orjson`` (a tenth of the CPU of ``json``'s encoder).
    What ``orjson`` refuses (an integer past 64 bits, a lone surrogate, a key that is not a string)
    is written by ``json.dumps`` with every non-ASCII character escaped, so any value ``json``
    writes gives valid UTF-8. A float that is not finite, which JSON cannot hold (``json.dumps``
    writes ``NaN``, which a server refuses), is written as ``null``, as ``orjson`` writes it."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def _loads_bounded(data: str | bytes) -> object:
    try:
        return json.loads(data, parse_int=bounded_int)
    except RecursionError:  # the caller's own stack was deep already
        raise ValueError("JSON nested too deeply") from None


def _cut_deeper_than(text: str, limit: int) -> str:
    """``text`` with every array or object that opens deeper than ``limit`` levels replaced by
    ``null``; iterative, so any depth is cut. Invalid JSON stays invalid (``json.loads`` says where)."""
    kept: list[str] = []
    depth = 0
    resume = 0  # where the text to keep starts again after a cut
    for token in _STRUCTURE.finditer(text):
        bracket = token.group()
        if bracket[0] == '"':
            continue
        if bracket in "[{":
            depth += 1
            if depth == limit + 1:
                kept.append(text[resume : token.start()])
                kept.append("null")
        else:
            if depth == limit + 1:
                resume = token.end()
            depth -= 1
    if depth > limit:
        return text  # unclosed: not JSON whatever is cut, and json.loads says so
    kept.append(text[resume:])
    return "".join(kept)
