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
:class:`OverlongNumber` is what an integer literal too long for Python becomes; both
live in ``kruntimes.jsontext``, a leaf module the Kubernetes client imports too.

This is a purely computational module with no side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, TypeVar, cast

from returns.result import Failure, Result, Success

# Decoding text lives in a leaf module the Kubernetes client shares (kruntimes.jsontext).
from kruntimes.jsontext import MAX_DEPTH as MAX_DEPTH
from kruntimes.jsontext import OverlongNumber as OverlongNumber
from kruntimes.jsontext import bounded_int as bounded_int
from kruntimes.jsontext import loads as loads

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
