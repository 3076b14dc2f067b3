"""Reading parsed JSON (or YAML) values: one path-tracking toolkit for every reader.

Two families of accessors. The *lenient* ones (:func:`as_map`, :func:`as_list`,
:func:`text_of`, :func:`map_of`) return ``None`` or a neutral value for a
wrong type; Kubernetes objects are read with them, since SPEC §1 makes a
malformed annotation or condition ignorable, and they are what the per-event hot
paths call. The *strict* ones (``expect_*`` for a value, ``get_*`` for a field
of a map)
raise :class:`Invalid` carrying a :class:`JsonError`: the field's path, such as
``objects[3].metadata.name``, and a message describing what was found, e.g.
``must be a string, not the number 5 (quote it: "5")``. :class:`Invalid` is a
reader's internal control flow; :func:`reading` turns it into a ``Result`` at
the reader's edge, so no exception leaves a reader.

Decoding text: :func:`loads` is ``json.loads`` made total on what a server or a file
can hold (an integer literal of any length, nesting of any depth), and
:class:`OverlongNumber` is what an integer literal too long for Python becomes.

This is a purely computational module with no side effects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, TypeVar, cast

from returns.result import Failure, Result, Success

JsonReason: TypeAlias = Literal["NotAnObject", "MissingField", "WrongType", "UnknownKind"]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class JsonError:
    """Why a value could not be read: ``path`` names the field ("" for the whole value)."""

    reason: JsonReason
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def within(self, prefix: str) -> JsonError:
        """The same error for a value read at ``prefix`` of a larger document."""
        return JsonError(self.reason, join(prefix, self.path) if self.path else prefix, self.message)


class Invalid(Exception):
    """Raised by the strict accessors; caught by the reader (see :func:`reading`), never by callers."""

    def __init__(self, path: str, message: str, reason: JsonReason = "WrongType") -> None:
        super().__init__(message)
        self.error = JsonError(reason, path, message)


# --- decoding text ---------------------------------------------------------------------


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

# A JSON string (escapes included) or one bracket: what the depth of a document is made of.
_STRUCTURE: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def loads(data: str | bytes) -> object:
    """``json.loads`` that no JSON document makes raise anything but a ``ValueError`` for invalid JSON.

    An integer literal longer than Python converts decodes to :class:`OverlongNumber`
    (rather than failing the whole document), and a value nested deeper than Python's
    recursion allows to ``null`` (past :data:`MAX_DEPTH` levels; rather than a
    ``RecursionError``): one hostile object in a list leaves the others readable. The
    common document costs what ``json.loads`` costs: the rest runs only after it refused.
    """
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer literal past Python's digit limit (or undecodable bytes, raised again)
        return _loads_bounded(data)
    except RecursionError:
        text = data if isinstance(data, str) else data.decode(json.detect_encoding(data), "surrogatepass")
        return _loads_bounded(_cut_deeper_than(text, MAX_DEPTH))


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


# --- paths ---------------------------------------------------------------------------


def join(path: str, key: str) -> str:
    """``path.key``, or ``key`` at the top."""
    return f"{path}.{key}" if path else key


def at(path: str, index: int) -> str:
    """``path[index]``."""
    return f"{path}[{index}]"


# --- describing what was found ------------------------------------------------------


_SHOWN_BITS: Final = 99
"""Integers of at most this many bits (fewer than 2**99, at most 30 digits) are shown in messages."""


def describe(value: object) -> str:
    """What a value is, for ``must be X, not <describe>``: numbers are shown, strings are not."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, OverlongNumber):
        return f"a number of {value.digits} digits"
    if isinstance(value, int) and value.bit_length() > _SHOWN_BITS:
        return "a number of 30 digits or more"  # shown whole, it would make the message as long
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a map"
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        return "a list"
    return type(value).__name__


def wrong(path: str, expected: str, value: object) -> Invalid:
    """``must be <expected>, not <what value is>``."""
    return Invalid(path, f"must be {expected}, not {describe(value)}")


# --- lenient accessors (hot paths; never raise) --------------------------------------


def as_map(value: object) -> Mapping[str, object] | None:
    # ``type(...) is`` first: decoded JSON is dicts and lists, and an ABC check costs more.
    if type(value) is dict or isinstance(value, Mapping):
        return value
    return None


def as_list(value: object) -> Sequence[object] | None:
    """A JSON array; a string is not one."""
    if type(value) is list:
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return None
    return value


def text_of(obj: Mapping[str, object], key: str) -> str:
    """A string field, or "" when absent or not a string."""
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def map_of(obj: Mapping[str, object], key: str) -> Mapping[str, object]:
    """A map field, or an empty map when absent or not a map."""
    value = obj.get(key)
    if type(value) is dict or isinstance(value, Mapping):
        return value
    return _EMPTY


_EMPTY: Mapping[str, object] = {}


# --- strict accessors ------------------------------------------------------------------


def expect_map(value: object, path: str, *, noun: str = "a map") -> Mapping[str, object]:
    """A map whose keys are all strings (YAML allows others)."""
    if not isinstance(value, Mapping):
        raise wrong(path, noun, value)
    for key in cast(Mapping[object, object], value):
        if not isinstance(key, str):
            raise Invalid(path, f"keys must be strings, not {describe(key)} ({key!r})")
    return cast(Mapping[str, object], value)


def expect_object(value: object, path: str) -> Mapping[str, object]:
    """:func:`expect_map` in JSON's words (``must be an object``)."""
    return expect_map(value, path, noun="an object")


def expect_list(value: object, path: str) -> Sequence[object]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise wrong(path, "a list", value)
    return cast(Sequence[object], value)


def expect_string(value: object, path: str, *, nonempty: bool = False, expected: str = "a string") -> str:
    if not isinstance(value, str):
        shown = isinstance(value, (bool, float)) or (isinstance(value, int) and value.bit_length() <= _SHOWN_BITS)
        hint = f' (quote it: "{value}")' if shown else ""
        raise Invalid(path, f"must be {expected}, not {describe(value)}{hint}")
    if nonempty and not value:
        raise Invalid(path, "must be a non-empty string")
    return value


def expect_int(value: object, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise wrong(path, "an integer", value)
    return value


def expect_number(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong(path, "a number", value)
    try:
        return float(value)
    except OverflowError:  # an integer past the largest float
        raise Invalid(path, f"must be a number a float can hold, not {describe(value)}") from None


def expect_bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise wrong(path, "a boolean", value)
    return value


def field(obj: Mapping[str, object], key: str, path: str) -> object:
    """A field that must be present (it may be null)."""
    if key not in obj:
        raise Invalid(join(path, key), "is missing", "MissingField")
    return obj[key]


def items(value: object, path: str, item: Callable[[object, str], _T]) -> tuple[_T, ...]:
    """Every element of a list read with ``item``, each at ``path[i]``."""
    return tuple(item(element, at(path, index)) for index, element in enumerate(expect_list(value, path)))


def nullable(value: object, path: str, item: Callable[[object, str], _T]) -> _T | None:
    return None if value is None else item(value, path)


def get_string(obj: Mapping[str, object], key: str, path: str) -> str:
    return expect_string(field(obj, key, path), join(path, key))


def get_optional_string(obj: Mapping[str, object], key: str, path: str) -> str | None:
    """A field that must be present, a string or null."""
    value = field(obj, key, path)
    return None if value is None else expect_string(value, join(path, key), expected="a string or null")


def get_int(obj: Mapping[str, object], key: str, path: str) -> int:
    return expect_int(field(obj, key, path), join(path, key))


def get_number(obj: Mapping[str, object], key: str, path: str) -> float:
    return expect_number(field(obj, key, path), join(path, key))


def get_bool(obj: Mapping[str, object], key: str, path: str) -> bool:
    return expect_bool(field(obj, key, path), join(path, key))


def get_items(obj: Mapping[str, object], key: str, path: str, item: Callable[[object, str], _T]) -> tuple[_T, ...]:
    return items(field(obj, key, path), join(path, key), item)


def get_nullable(obj: Mapping[str, object], key: str, path: str, item: Callable[[object, str], _T]) -> _T | None:
    return nullable(field(obj, key, path), join(path, key), item)


def only_keys(obj: Mapping[str, object], allowed: Sequence[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            raise Invalid(join(path, key), f"unknown field (expected one of: {', '.join(allowed)})")


def reading(read: Callable[[], _T]) -> Result[_T, JsonError]:
    """Run a strict reader: its value, or the :class:`JsonError` it raised."""
    try:
        return Success(read())
    except Invalid as problem:
        return Failure(problem.error)
    except RecursionError:
        return Failure(JsonError("WrongType", "", "nested too deeply"))
