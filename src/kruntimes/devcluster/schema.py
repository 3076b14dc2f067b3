"""Structural-schema behaviour of custom resources: pruning, strict field validation, types, immutability.

A real API server fills in ``default`` values, silently drops fields a CRD schema does not declare (unless
``x-kubernetes-preserve-unknown-fields``), answers 400 for them under
``fieldValidation=Strict`` (what ``kubectl apply`` sends), and 422 for type and
``self == oldSelf`` violations. Code that writes an undeclared field works
against a permissive fake and loses data in production; this module makes the
dev cluster lose it too. Only the CEL rule ``self == oldSelf`` is understood;
other rules are ignored.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, final

_ROOT_KEPT: Final = frozenset(("apiVersion", "kind", "metadata"))


@final
@dataclass(slots=True)
class SchemaReport:
    """What :func:`apply_schema` found; ``value`` is the pruned object."""

    value: Any
    unknown: list[str] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)


def apply_schema(schema: Mapping[str, Any], obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> SchemaReport:
    """Prune ``obj`` against ``schema`` and collect unknown fields and validation errors (old enables immutability)."""
    report = SchemaReport(None)
    pruned = {k: v for k, v in obj.items() if k in _ROOT_KEPT}
    rest = {k: v for k, v in obj.items() if k not in _ROOT_KEPT}
    props = schema.get("properties", {})
    root_schema = {**schema, "properties": {k: v for k, v in props.items() if k not in _ROOT_KEPT}}
    walked = _walk(root_schema, rest, old if old is None else {k: v for k, v in old.items() if k not in _ROOT_KEPT}, "", report, old is not None)
    report.value = {**pruned, **walked}
    return report


def _type_ok(schema: Mapping[str, Any], value: Any) -> bool:
    if value is None:
        return bool(schema.get("nullable"))
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    match schema.get("type"):
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case _:
            return True


def _walk(schema: Mapping[str, Any], value: Any, old: Any, path: str, report: SchemaReport, updating: bool) -> Any:
    shown = path or "<root>"
    if not _type_ok(schema, value):
        report.errors.append((shown, f'Invalid value: "{type(value).__name__}": {shown} in body must be of type {schema.get("type", "integer or string")}'))
        return value
    if updating and old is not None:
        for rule in schema.get("x-kubernetes-validations", ()):
            if rule.get("rule") == "self == oldSelf" and value != old:
                report.errors.append((shown, f"Invalid value: {rule.get('message', 'Value is immutable')}"))
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{v}"' for v in schema["enum"])
        report.errors.append((shown, f'Unsupported value: "{value}": supported values: {allowed}'))
    if isinstance(value, (int, float)) and not isinstance(value, bool) and "minimum" in schema and value < schema["minimum"]:
        report.errors.append((shown, f"Invalid value: {value}: {shown} in body should be greater than or equal to {schema['minimum']}"))
    if isinstance(value, dict):
        return _walk_object(schema, value, old if isinstance(old, dict) else None, path, report, updating)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_walk(schema["items"], item, None, f"{path}[{i}]", report, updating) for i, item in enumerate(value)]
    return value


def _walk_object(schema: Mapping[str, Any], value: dict[str, Any], old: dict[str, Any] | None, path: str, report: SchemaReport, updating: bool) -> dict[str, Any]:
    props: Mapping[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True or (not props and not isinstance(extra, dict) and "type" not in schema)
    for key, sub in props.items():
        if key not in value and "default" in sub:  # structural-schema defaulting, as on a real server
            value = {**value, key: copy.deepcopy(sub["default"])}
    for name in schema.get("required", ()):
        if name not in value:
            report.errors.append((f"{path}.{name}".lstrip("."), "Required value"))
    out: dict[str, Any] = {}
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        sub = props.get(key)
        if sub is None and isinstance(extra, dict):
            sub = extra
        if sub is not None:
            out[key] = _walk(sub, item, None if old is None else old.get(key), child, report, updating)
        elif keep_unknown:
            out[key] = item
        else:
            report.unknown.append(child)
    if updating and old is not None:
        # a field that disappeared still violates "self == oldSelf"
        for key, sub in props.items():
            if key in old and key not in value:
                for rule in sub.get("x-kubernetes-validations", ()):
                    if rule.get("rule") == "self == oldSelf":
                        report.errors.append((f"{path}.{key}".lstrip("."), f"Invalid value: {rule.get('message', 'Value is immutable')}"))
    return out
