"""Structural schemas applied to custom resources the way kube-apiserver applies them.

For every write of a custom resource (create, update, patch after the patch is
applied, status writes, and dry runs alike) the API server

1. **prunes** fields the schema does not declare (except under
   ``x-kubernetes-preserve-unknown-fields`` or ``additionalProperties``) and
   nulls of fields that are not ``nullable``; the pruned paths are what
   ``fieldValidation=Strict`` answers 400 for and ``Warn`` warns about;
2. **defaults**: a property with a ``default`` that is absent (or a non-nullable
   null) gets the default, at every depth, but only where its parent object is
   present: ``spec.workspace.kind`` is defaulted when ``spec.workspace`` exists,
   and nothing creates ``spec.workspace`` itself unless it has a default;
3. **validates** the result against the OpenAPI value validations (``type``,
   ``enum``, ``pattern``, ``format``, ``minimum``/``maximum`` and their
   exclusive forms, ``multipleOf``, ``minLength``/``maxLength``,
   ``minItems``/``maxItems``, ``minProperties``/``maxProperties``, ``required``,
   ``nullable``, ``anyOf``/``allOf``/``oneOf``/``not``, ``x-kubernetes-int-or-string``,
   ``x-kubernetes-list-type: set|map`` uniqueness), then, when no value has the
   wrong type, the ``x-kubernetes-validations`` CEL rules
   (:mod:`kruntimes.devcluster.celrules`), with ``oldSelf`` on updates.

Each failure is a :class:`~kruntimes.devcluster.errors.FieldError` worded as
apimachinery words it; the service turns them into one 422 ``Invalid``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import ipaddress
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, final

from kruntimes.devcluster.celrules import CompiledRule, canonical, compile_rule
from kruntimes.devcluster.errors import FieldError
from kruntimes.devcluster.types import json_copy

_ROOT_KEPT: Final = frozenset(("apiVersion", "kind", "metadata"))
_TYPE_INVALID: Final = "FieldValueTypeInvalid"
_BLOCKING: Final = frozenset({_TYPE_INVALID, "FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong", "FieldValueTooMany"})
"""Value errors after which kube-apiserver runs no CEL rule (``hasBlockingErr``): the rules would read
values of the wrong type, absent required fields, or unbounded sizes their cost was estimated against."""
_RULES_NOT_CHECKED: Final = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"


@final
@dataclass(slots=True)
class SchemaReport:
    """What :func:`apply_schema` found; ``value`` is the pruned and defaulted object."""

    value: Any
    unknown: list[str] = field(default_factory=list)
    errors: list[FieldError] = field(default_factory=list)


def apply_schema(schema: Mapping[str, Any], obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> SchemaReport:
    """Prune, default and validate ``obj`` against the ``openAPIV3Schema`` ``schema`` (``old``: the stored object on update).

    ``apiVersion``, ``kind`` and ``metadata`` are the server's own business and pass untouched.
    """
    report = SchemaReport(None)
    props: Mapping[str, Any] = schema.get("properties", {})
    body_schema = {**schema, "properties": {k: v for k, v in props.items() if k not in _ROOT_KEPT}}
    kept = {k: v for k, v in obj.items() if k in _ROOT_KEPT}
    body = _prune(body_schema, {k: v for k, v in obj.items() if k not in _ROOT_KEPT}, "", report.unknown)
    _default(body_schema, body)
    _validate(body_schema, body, "", report.errors)
    if any(e.reason in _BLOCKING for e in report.errors):
        if _has_rules(schema):
            report.errors.append(FieldError("FieldValueInvalid", "<nil>", f"Invalid value: null: {_RULES_NOT_CHECKED}"))
    else:
        whole = {**_cel_view(kept), **body}
        old_whole = None
        if old is not None:  # the stored object as the server reads it back: pruned and defaulted with today's schema
            old_body = _prune(body_schema, {k: v for k, v in old.items() if k not in _ROOT_KEPT}, "", [])
            _default(body_schema, old_body)
            old_whole = {**_cel_view(old), **old_body}
        _rules(schema, whole, old_whole, old is not None, "", report.errors)
    report.value = {**kept, **body}
    return report


def _cel_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as CEL rules see it: of ``metadata`` only ``name`` and ``generateName``."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    view = {k: v for k, v in obj.items() if k != "metadata"}
    view["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    return view


# -- pruning -----------------------------------------------------------------------------------


def _nullable(schema: Mapping[str, Any]) -> bool:
    return bool(schema.get("nullable"))


def _keeps_unknown(schema: Mapping[str, Any]) -> bool:
    if schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("additionalProperties") is True:
        return True
    # a node that says nothing about its shape (no type, no properties) describes any value
    return "type" not in schema and "properties" not in schema and "additionalProperties" not in schema and not schema.get("x-kubernetes-int-or-string")


def _prune(schema: Mapping[str, Any], value: Any, path: str, unknown: list[str]) -> Any:
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        keep = _keeps_unknown(schema)
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = props.get(key)
            if sub is None and isinstance(extra, dict):
                sub = extra
            child = f"{path}.{key}" if path else key
            if sub is not None:
                if item is None and not _nullable(sub):
                    continue  # a null for a non-nullable field is dropped (then defaulted)
                out[key] = _prune(sub, item, child, unknown)
            elif keep:
                out[key] = item
            else:
                unknown.append(child)
        return out
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [_prune(items, item, f"{path}[{i}]", unknown) for i, item in enumerate(value)]
        return list(value)
    return value


# -- defaulting --------------------------------------------------------------------------------


def _default(schema: Mapping[str, Any], value: Any) -> None:
    """Fill in defaults below ``value`` in place (``value`` is a fresh copy from :func:`_prune`)."""
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        for key, sub in props.items():
            if "default" in sub and (key not in value or (value[key] is None and not _nullable(sub))):
                value[key] = json_copy(sub["default"])
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key)
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is not None:
                _default(sub, item)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in value:
                _default(items, item)


# -- OpenAPI value validation ------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer" if -(2**63) <= value < 2**63 else "number"  # beyond int64 a JSON decoder yields a float
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def shown(value: Any) -> str:
    """A value as apimachinery prints it after ``Invalid value:`` (Go-quoted strings, bare numbers, a type for composites)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None:
        return "null"
    return f'"{_json_type(value)}"'


def _type_ok(expected: str, value: Any) -> bool:
    actual = _json_type(value)
    return actual == expected or (expected == "number" and actual == "integer")


def _err(errors: list[FieldError], reason: str, path: str, detail: str) -> None:
    errors.append(FieldError(reason, path, detail))


def _invalid(errors: list[FieldError], path: str, value: Any, message: str) -> None:
    _err(errors, "FieldValueInvalid", path, f"Invalid value: {shown(value)}: {message}")


_FORMATS: dict[str, Callable[[str], bool]] = {}


def _format(name: str) -> Callable[[Callable[[str], bool]], Callable[[str], bool]]:
    def register(check: Callable[[str], bool]) -> Callable[[str], bool]:
        _FORMATS[name] = check
        return check

    return register


_DATE_TIME: Final = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})$")
_UUID: Final = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_HOSTNAME: Final = re.compile(r"^(?=.{1,255}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*\.?$")
_MAC: Final = re.compile(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$")


@_format("date-time")
def _date_time(text: str) -> bool:
    m = _DATE_TIME.match(text)
    if m is None:
        return False
    try:
        dt.datetime(int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), min(int(m[6]), 59))
    except ValueError:
        return False
    return int(m[6]) <= 60


@_format("date")
def _date(text: str) -> bool:
    try:
        return re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) is not None and dt.date.fromisoformat(text) is not None
    except ValueError:
        return False


@_format("byte")
def _byte(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


for _name in ("uuid", "uuid3", "uuid4", "uuid5"):
    _FORMATS[_name] = lambda text: _UUID.match(text) is not None


@_format("ipv4")
def _ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


@_format("ipv6")
def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


@_format("cidr")
def _cidr(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


_FORMATS["hostname"] = lambda text: _HOSTNAME.match(text) is not None
_FORMATS["mac"] = lambda text: _MAC.match(text) is not None


def format_ok(name: str, text: str) -> bool:
    """Whether ``text`` is valid in string format ``name``; formats the server does not check are always valid."""
    check = _FORMATS.get(name)
    return check is None or check(text)


def _validate(schema: Mapping[str, Any], value: Any, path: str, errors: list[FieldError]) -> None:
    where = path or "<root>"
    if value is None:
        if not _nullable(schema) and "type" in schema:
            _err(errors, _TYPE_INVALID, where, f'Invalid value: "null": {where} in body must be of type {schema["type"]}: "null"')
        return
    if schema.get("x-kubernetes-int-or-string"):
        if _json_type(value) not in ("integer", "string"):
            _err(errors, _TYPE_INVALID, where, f'Invalid value: {shown(value)}: {where} in body must be of type integer or string: "{_json_type(value)}"')
            return
    elif "type" in schema and not _type_ok(str(schema["type"]), value):
        _err(errors, _TYPE_INVALID, where, f'Invalid value: "{_json_type(value)}": {where} in body must be of type {schema["type"]}: "{_json_type(value)}"')
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(shown(v) for v in schema["enum"])
        _err(errors, "FieldValueNotSupported", where, f"Unsupported value: {shown(value)}: supported values: {allowed}")
    if isinstance(value, str):
        _validate_string(schema, value, where, errors)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(schema, value, where, errors)
    elif isinstance(value, list):
        _validate_array(schema, value, path, where, errors)
    elif isinstance(value, dict):
        _validate_object(schema, value, path, where, errors)
    _validate_combinators(schema, value, path, where, errors)


def _validate_string(schema: Mapping[str, Any], value: str, where: str, errors: list[FieldError]) -> None:
    if "maxLength" in schema and len(value) > int(schema["maxLength"]):
        _err(errors, "FieldValueTooLong", where, f"Too long: may not be more than {int(schema['maxLength'])} bytes")
    if "minLength" in schema and len(value) < int(schema["minLength"]):
        _invalid(errors, where, value, f"{where} in body should be at least {int(schema['minLength'])} chars long")
    if "pattern" in schema and not pattern_matches(str(schema["pattern"]), value):
        _invalid(errors, where, value, f"{where} in body should match '{schema['pattern']}'")
    if "format" in schema and not format_ok(str(schema["format"]), value):
        _invalid(errors, where, value, f"{where} in body must be of type {schema['format']}: {shown(value)}")


@functools.lru_cache(maxsize=512)
def _regexp(pattern: str) -> Callable[[str], bool]:
    """``pattern`` compiled with RE2, the engine kube-apiserver uses (Python's ``re`` if RE2 refuses it)."""
    import re2  # on first use: importing the dev cluster must stay cheap (every kruntimes command does)

    try:
        compiled = re2.compile(pattern)
        return lambda text: compiled.search(text) is not None
    except re2.error:
        fallback = re.compile(pattern)
        return lambda text: fallback.search(text) is not None


_REMEMBERED_VALUE_MAX: Final = 256
"""Longest value whose pattern check is remembered (names and quantities are far shorter)."""


def pattern_matches(pattern: str, text: str) -> bool:
    """OpenAPI ``pattern``: an unanchored search. Remembered per (pattern, value) for short values:
    the same ones come back on every write of an object (its quantities, names, condition
    reasons), and a search through the RE2 binding's Python wrapper costs more than the lookup."""
    if len(text) > _REMEMBERED_VALUE_MAX:
        return _regexp(pattern)(text)
    return _remembered_match(pattern, text)


@functools.lru_cache(maxsize=8192)
def _remembered_match(pattern: str, text: str) -> bool:
    return _regexp(pattern)(text)


def _validate_number(schema: Mapping[str, Any], value: float, where: str, errors: list[FieldError]) -> None:
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            _invalid(errors, where, value, f"{where} in body should be greater than {low}")
        elif value < low:
            _invalid(errors, where, value, f"{where} in body should be greater than or equal to {low}")
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= high:
            _invalid(errors, where, value, f"{where} in body should be less than {high}")
        elif value > high:
            _invalid(errors, where, value, f"{where} in body should be less than or equal to {high}")
    step = schema.get("multipleOf")
    if isinstance(step, (int, float)) and step > 0:
        quotient = value / step
        if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
            _invalid(errors, where, value, f"{where} in body should be a multiple of {step}")


def _map_key(schema: Mapping[str, Any], item: Any) -> tuple[Any, ...] | None:
    keys = schema.get("x-kubernetes-list-map-keys") or ()
    if not isinstance(item, dict):
        return None
    return tuple(json.dumps(item.get(k), sort_keys=True) for k in keys)


def _validate_array(schema: Mapping[str, Any], value: list[Any], path: str, where: str, errors: list[FieldError]) -> None:
    if "maxItems" in schema and len(value) > int(schema["maxItems"]):
        _err(errors, "FieldValueTooMany", where, f"Too many: {len(value)}: must have at most {int(schema['maxItems'])} items")
    if "minItems" in schema and len(value) < int(schema["minItems"]):
        _invalid(errors, where, len(value), f"{where} in body should have at least {int(schema['minItems'])} items")
    list_type = schema.get("x-kubernetes-list-type")
    seen: set[Any] = set()
    for i, item in enumerate(value):
        if list_type == "set":
            key: Any = json.dumps(item, sort_keys=True)
            if key in seen:
                _err(errors, "FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {shown(item)}")
            seen.add(key)
        elif list_type == "map":
            mkey = _map_key(schema, item)
            if mkey is not None:
                if mkey in seen:
                    rendered = json.dumps({k: item.get(k) for k in schema.get("x-kubernetes-list-map-keys") or ()}, separators=(",", ":"))
                    _err(errors, "FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {rendered}")
                seen.add(mkey)
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(items, item, f"{path}[{i}]", errors)


def _validate_object(schema: Mapping[str, Any], value: dict[str, Any], path: str, where: str, errors: list[FieldError]) -> None:
    for name in schema.get("required", ()):
        if name not in value:
            _err(errors, "FieldValueRequired", f"{path}.{name}" if path else name, "Required value")
    if "maxProperties" in schema and len(value) > int(schema["maxProperties"]):
        _err(errors, "FieldValueTooMany", where, f"Too many: {len(value)}: must have at most {int(schema['maxProperties'])} items")
    if "minProperties" in schema and len(value) < int(schema["minProperties"]):
        _invalid(errors, where, len(value), f"{where} in body should have at least {int(schema['minProperties'])} properties")
    props: Mapping[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        sub = props.get(key)
        if sub is not None:
            _validate(sub, item, f"{path}.{key}" if path else key, errors)
        elif isinstance(extra, dict):
            _validate(extra, item, f"{path}[{key}]" if path else key, errors)


def _passes(schema: Mapping[str, Any], value: Any, path: str) -> bool:
    found: list[FieldError] = []
    _validate(schema, value, path, found)
    return not found


def _validate_combinators(schema: Mapping[str, Any], value: Any, path: str, where: str, errors: list[FieldError]) -> None:
    # x-kubernetes-int-or-string's anyOf [{type: integer}, {type: string}] is already decided above
    any_of = [s for s in schema.get("anyOf") or () if isinstance(s, dict)]
    if any_of and not schema.get("x-kubernetes-int-or-string") and not any(_passes(s, value, path) for s in any_of):
        _invalid(errors, where, value, f"{where} in body must match at least one schema in anyOf")
    one_of = [s for s in schema.get("oneOf") or () if isinstance(s, dict)]
    if one_of and sum(1 for s in one_of if _passes(s, value, path)) != 1:
        _invalid(errors, where, value, f"{where} in body must match exactly one schema in oneOf")
    for sub in schema.get("allOf") or ():
        if isinstance(sub, dict):
            _validate(sub, value, path, errors)
    negated = schema.get("not")
    if isinstance(negated, dict) and _passes(negated, value, path):
        _invalid(errors, where, value, f"{where} in body must not be valid against the schema in not")


# -- x-kubernetes-validations ------------------------------------------------------------------

_RULE_DETAIL: Final = {
    "FieldValueRequired": "Required value: {message}",
    "FieldValueForbidden": "Forbidden: {message}",
    "FieldValueDuplicate": "Duplicate value: {message}",
}


_COMPILED: dict[int, tuple[Any, list[CompiledRule]]] = {}


def _compiled(entries: Any) -> list[CompiledRule]:
    """The compiled rules of one ``x-kubernetes-validations`` list (kept with the list, which schemas keep alive)."""
    found = _COMPILED.get(id(entries))
    if found is not None and found[0] is entries:
        return found[1]
    rules = [compile_rule(entry) for entry in entries]
    _COMPILED[id(entries)] = (entries, rules)
    return rules


def _rules(schema: Mapping[str, Any], value: Any, old: Any, has_old: bool, path: str, errors: list[FieldError]) -> None:
    if value is None:
        return
    entries = schema.get("x-kubernetes-validations")
    rules = _compiled(entries) if entries else []
    keys = (canonical(value), canonical(old) if has_old and any(r.transition for r in rules) else None) if rules else None
    for rule in rules:
        outcome = rule.evaluate(value, old, has_old, keys)
        if outcome is None or outcome.ok:
            continue
        where = path + rule.field_path if rule.field_path.startswith((".", "[")) else (f"{path}.{rule.field_path}" if rule.field_path else path)
        where = where.lstrip(".") or "<root>"
        template = _RULE_DETAIL.get(rule.reason)
        if outcome.evaluation_error:  # the value is the schema's type
            template, detail = None, f'Invalid value: "{schema.get("type") or _json_type(value)}": {outcome.message}'
        elif template:
            detail = template.format(message=outcome.message)
        elif isinstance(value, (dict, list)):  # a composite value is not printed
            detail = f"Invalid value: {outcome.message}"
        else:
            detail = f"Invalid value: {shown(value)}: {outcome.message}"
        errors.append(FieldError(rule.reason if template else "FieldValueInvalid", where, detail))
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key)
            child = f"{path}.{key}" if path else key
            if sub is None and isinstance(extra, dict):
                sub, child = extra, (f"{path}[{key}]" if path else key)
            if sub is None:
                continue
            correlated = has_old and isinstance(old, dict) and key in old
            _rules(sub, item, old[key] if correlated else None, correlated, child, errors)
    elif isinstance(value, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return
        olds: dict[Any, Any] = {}
        list_type = schema.get("x-kubernetes-list-type")
        if has_old and isinstance(old, list) and list_type == "map":
            olds = {k: o for o in old if (k := _map_key(schema, o)) is not None}
        elif has_old and isinstance(old, list) and list_type == "set":
            olds = {json.dumps(o, sort_keys=True): o for o in old}
        for i, item in enumerate(value):
            key = _map_key(schema, item) if list_type == "map" else json.dumps(item, sort_keys=True) if list_type == "set" else None
            correlated = key is not None and key in olds
            _rules(items, item, olds.get(key) if correlated else None, correlated, f"{path}[{i}]", errors)


_HAS_RULES: dict[int, tuple[Any, bool]] = {}


def _has_rules(schema: Any) -> bool:
    """Whether any ``x-kubernetes-validations`` sits anywhere in ``schema`` (the server then has a CEL
    validator); remembered per schema object, as :func:`_compiled` does."""
    known = _HAS_RULES.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    found = isinstance(schema, dict) and (
        bool(schema.get("x-kubernetes-validations"))
        or any(_has_rules(sub) for sub in (schema.get("properties") or {}).values())
        or any(_has_rules(schema.get(key)) for key in ("items", "additionalProperties"))
    )
    _HAS_RULES[id(schema)] = (schema, found)
    return found


def compile_schema_rules(schema: Any, path: str = "") -> list[tuple[str, str]]:
    """Every CEL rule under ``schema`` that does not compile, as (schema path, error): a CRD with one is refused."""
    problems: list[tuple[str, str]] = []
    if not isinstance(schema, dict):
        return problems
    for i, entry in enumerate(schema.get("x-kubernetes-validations") or ()):
        if not isinstance(entry, dict) or not isinstance(entry.get("rule"), str):
            problems.append((f"{path}.x-kubernetes-validations[{i}].rule", "Required value"))
            continue
        try:
            compile_rule(entry)
        except ValueError as exc:
            problems.append((f"{path}.x-kubernetes-validations[{i}].rule", f"Invalid value: {shown(entry['rule'])}: {exc}"))
    for key, sub in (schema.get("properties") or {}).items():
        problems += compile_schema_rules(sub, f"{path}.properties[{key}]")
    for key in ("items", "additionalProperties"):
        problems += compile_schema_rules(schema.get(key), f"{path}.{key}")
    return problems
