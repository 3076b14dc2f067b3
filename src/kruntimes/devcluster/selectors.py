"""Label and field selectors with the grammar and semantics of ``kubectl -l`` / ``--field-selector``.

Parsing happens once per request; the compiled selector is a plain predicate
the store evaluates against the object before and after each change, which is
how a watcher with a selector sees an object *leave* its view as ``DELETED``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, final

from kruntimes.devcluster.errors import ApiError, bad_request
from kruntimes.devcluster.types import Obj

Operator = Literal["=", "!=", "in", "notin", "exists", "!", "gt", "lt"]

_QUALIFIED_NAME: Final = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@final
@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        match self.operator:
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case "exists":
                return present
            case "!":
                return not present
            case "gt" | "lt":
                if not present:
                    return False
                try:
                    have, want = int(value), int(self.values[0])
                except ValueError:
                    return False
                return have > want if self.operator == "gt" else have < want


@final
@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def valid_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


_COMPARISONS: Final[dict[str, Operator]] = {"=": "=", "==": "=", "!=": "!=", ">": "gt", "<": "lt"}
_SYMBOLS: Final = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")


def _tokens(text: str) -> list[str]:
    """Split into symbols and words; a word is any run of other non-space characters."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        for sym in _SYMBOLS:
            if text.startswith(sym, i):
                out.append(sym)
                i += len(sym)
                break
        else:
            j = i
            while j < len(text) and not text[j].isspace() and not any(text.startswith(s, j) for s in _SYMBOLS):
                j += 1
            out.append(text[i:j])
            i = j
    return out


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the full string grammar: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``, ``a>1``, ``a<1``.

    Raises :class:`ApiError` (400 BadRequest) with the offending requirement, as the API server does.
    """
    toks = _tokens(text)
    reqs: list[Requirement] = []
    pos = 0

    def fail(why: str) -> ApiError:
        return bad_request(f"unable to parse requirement: {why}")

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    while pos < len(toks):
        negated = False
        if toks[pos] == "!":
            negated = True
            pos += 1
        key = peek()
        if key is None or key in _SYMBOLS:
            raise fail(f"found '{key or ''}', expected: identifier")
        if not valid_label_key(key):
            raise fail(f'key: Invalid value: "{key}": name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\'')
        pos += 1
        nxt = peek()
        if negated:
            if nxt not in (None, ","):
                raise fail(f"found '{nxt}', expected: ',' or 'end of string'")
            reqs.append(Requirement(key, "!"))
        elif nxt in (None, ","):
            reqs.append(Requirement(key, "exists"))
        elif nxt in ("=", "==", "!=", ">", "<"):
            pos += 1
            value = peek()
            if value is None or value == ",":
                value = ""
            elif value in _SYMBOLS:
                raise fail(f"found '{value}', expected: identifier")
            else:
                pos += 1
            if not valid_label_value(value):
                raise fail(f'values[0][{key}]: Invalid value: "{value}"')
            op = _COMPARISONS[nxt]
            if op in ("gt", "lt"):
                try:
                    int(value)
                except ValueError:
                    raise fail(f"for 'Gt', 'Lt' operators, the value must be an integer: {value!r}") from None
            reqs.append(Requirement(key, op, (value,)))
        elif nxt in ("in", "notin"):
            pos += 1
            if peek() != "(":
                raise fail(f"found '{peek() or ''}', expected: '('")
            pos += 1
            values: list[str] = []
            while True:
                tok = peek()
                if tok is None:
                    raise fail("found 'end of string', expected: ')'")
                if tok == ")":
                    pos += 1
                    break
                if tok == ",":
                    pos += 1
                    if not values or peek() in (",", ")"):
                        values.append("")
                    continue
                if tok in _SYMBOLS:
                    raise fail(f"found '{tok}', expected: identifier")
                if not valid_label_value(tok):
                    raise fail(f'values[{len(values)}][{key}]: Invalid value: "{tok}"')
                values.append(tok)
                pos += 1
            if not values:
                raise fail("for 'in', 'notin' operators, values set can't be empty")
            reqs.append(Requirement(key, "in" if nxt == "in" else "notin", tuple(sorted(set(values)))))
        else:
            raise fail(f"found '{nxt}', expected: in, notin, =, ==, !=, gt, lt")
        if pos < len(toks):
            if toks[pos] != ",":
                raise fail(f"found '{toks[pos]}', expected: ',' or 'end of string'")
            pos += 1
            if pos == len(toks):
                raise fail("found 'end of string', expected: identifier")
    return LabelSelector(tuple(reqs))


# -- field selectors ---------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str


@final
@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(r.field for r in self.requirements)

    def matches(self, obj: Obj) -> bool:
        # each field read once however many terms name it (a sharded replica's watch carries one
        # ``metadata.namespace!=`` term per namespace it leaves out)
        values: dict[str, str] = {}
        for r in self.requirements:
            value = values.get(r.field)
            if value is None:
                value = values[r.field] = field_value(obj, r.field)
            if (value == r.value) != r.equal:
                return False
        return True

    def exact_name(self) -> str | None:
        """The name a ``metadata.name=X`` term pins, so a lookup can skip the scan."""
        for r in self.requirements:
            if r.field == "metadata.name" and r.equal:
                return r.value
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_field_selector(text: str, supported: Callable[[str], bool]) -> FieldSelector:
    """Parse ``f=v,f==v,f!=v`` (values may escape ``\\,``, ``\\=``, ``\\\\``); unknown fields are a 400."""
    reqs: list[FieldRequirement] = []
    if not text.strip():
        return FieldSelector()
    for term in _split_unescaped(text, ","):
        term = term.strip()
        for op, equal in (("!=", False), ("==", True), ("=", True)):
            idx = _find_unescaped(term, op)
            if idx >= 0:
                field, value = term[:idx].strip(), _unescape(term[idx + len(op) :].strip())
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        if not supported(field):
            raise bad_request(f'field label not supported: {field}')
        reqs.append(FieldRequirement(field, equal, value))
    return FieldSelector(tuple(reqs))


def _find_unescaped(term: str, op: str) -> int:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        if term.startswith(op, i):
            return i
        i += 1
    return -1


def field_value(obj: Obj, path: str) -> str:
    """The string a field selector compares: missing is "", booleans are ``true``/``false``."""
    cur: object = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def labels_of(obj: Obj) -> Mapping[str, str]:
    labels = obj.get("metadata", {}).get("labels")
    return labels if isinstance(labels, dict) else {}


@final
@dataclass(frozen=True, slots=True)
class Selection:
    """A request's label and field selector together; the store's watch filter."""

    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()

    def matches(self, obj: Obj) -> bool:
        return self.labels.matches(labels_of(obj)) and self.fields.matches(obj)


def parse_selection(label_text: str, field_text: str, supported_fields: Sequence[str]) -> Selection:
    allowed = frozenset(("metadata.name", "metadata.namespace", *supported_fields))
    return Selection(parse_label_selector(label_text), parse_field_selector(field_text, allowed.__contains__))


__all__ = [
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "Selection",
    "field_value",
    "parse_field_selector",
    "parse_label_selector",
    "parse_selection",
    "valid_label_key",
    "valid_label_value",
]
