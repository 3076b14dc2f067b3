"""Structural comparison of two CRDs: every difference an API server would act on, by path.

Compared: the CRD's name, group, names (kinds, plural, singular, short names), scope, and per
version: served, storage, deprecation, subresources, printer columns and the whole
``openAPIV3Schema`` (types, formats, required, enums, defaults, patterns, bounds, nullable,
``anyOf``/``allOf``/``oneOf``/``not``, ``items``, ``properties``, ``additionalProperties``, the
``x-kubernetes-*`` extensions, and ``x-kubernetes-validations`` rule by rule). Not compared:
``description`` (prose), and the CRD's metadata other than its name (labels, annotations).

A schema difference names the object path it applies to (``$.spec.source.inlinePath``, with
``[*]`` for list items and ``.*`` for map values) and the keyword that differs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

IGNORED: Final = frozenset({"description"})
NESTED: Final = {"items": "[*]", "additionalProperties": ".*", "not": "(not)"}
SCHEMA_LISTS: Final = ("anyOf", "allOf", "oneOf")
RULES: Final = "x-kubernetes-validations"


@dataclass(frozen=True, slots=True)
class Difference:
    """One way ``ours`` differs from ``upstream``: where (a CRD field, or an object path and keyword) and how."""

    crd: str
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.crd}: {self.where}: {self.what}"


def _show(value: object) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 160 else text[:157] + "..."


def schema_differences(upstream: Mapping[str, Any], ours: Mapping[str, Any], path: str = "$") -> list[tuple[str, str]]:
    """``(where, what)`` for every difference between two structural schemas, depth first."""
    found: list[tuple[str, str]] = []
    for key in sorted((set(upstream) | set(ours)) - IGNORED):
        if key not in ours:
            found.append((f"{path} {key}", f"upstream has {_show(upstream[key])}, ours has none"))
        elif key not in upstream:
            found.append((f"{path} {key}", f"ours has {_show(ours[key])}, upstream has none"))
        elif key == "properties":
            found.extend(_properties(upstream[key], ours[key], path))
        elif key in NESTED and isinstance(upstream[key], Mapping) and isinstance(ours[key], Mapping):
            found.extend(schema_differences(upstream[key], ours[key], path + NESTED[key]))
        elif key in SCHEMA_LISTS and len(upstream[key]) == len(ours[key]):
            for i, (u, o) in enumerate(zip(upstream[key], ours[key], strict=True)):
                found.extend(schema_differences(u, o, f"{path}({key}[{i}])"))
        elif key == RULES:
            found.extend(_rules(upstream[key], ours[key], path))
        elif upstream[key] != ours[key]:
            found.append((f"{path} {key}", f"upstream {_show(upstream[key])}, ours {_show(ours[key])}"))
    return found


def _properties(upstream: Mapping[str, Any], ours: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for name in sorted(set(upstream) | set(ours)):
        where = f"{path}.{name}"
        if name not in ours:
            found.append((where, f"missing: upstream declares {_show(_bare(upstream[name]))}"))
        elif name not in upstream:
            found.append((where, f"ours only: upstream does not declare it (ours {_show(_bare(ours[name]))})"))
        else:
            found.extend(schema_differences(upstream[name], ours[name], where))
    return found


def _bare(schema: object) -> object:
    if isinstance(schema, Mapping):
        return {k: _bare(v) for k, v in schema.items() if k not in IGNORED}
    if isinstance(schema, list):
        return [_bare(v) for v in schema]
    return schema


def _rules(upstream: Sequence[Mapping[str, Any]], ours: Sequence[Mapping[str, Any]], path: str) -> list[tuple[str, str]]:
    """Rules are matched by their CEL text; then each other key (message, messageExpression, reason,
    fieldPath, optionalOldSelf) must agree, and the order must too (it orders the server's causes)."""
    found: list[tuple[str, str]] = []
    where = f"{path} {RULES}"
    theirs = {str(r.get("rule")): r for r in upstream}
    mine = {str(r.get("rule")): r for r in ours}
    for text, entry in theirs.items():
        if text not in mine:
            found.append((where, f"missing rule {text!r} (message {_show(entry.get('message'))})"))
            continue
        other = mine[text]
        for key in sorted((set(entry) | set(other)) - {"rule"}):
            if entry.get(key) != other.get(key):
                found.append((where, f"{key} of rule {text!r}: upstream {_show(entry.get(key))}, ours {_show(other.get(key))}"))
    for text, entry in mine.items():
        if text not in theirs:
            found.append((where, f"ours only: rule {text!r} (message {_show(entry.get('message'))})"))
    shared_up = [t for t in theirs if t in mine]
    shared_ours = [t for t in mine if t in theirs]
    if shared_up != shared_ours:
        found.append((where, "the shared rules are in another order than upstream's"))
    return found


VERSION_KEYS: Final = ("served", "storage", "deprecated", "deprecationWarning", "subresources", "selectableFields")


def differences(upstream: Mapping[str, Any], ours: Mapping[str, Any]) -> list[Difference]:
    """Every difference between ``upstream`` (facts) and ``ours`` (a CRD manifest)."""
    name = str(upstream["metadata"]["name"])
    found: list[Difference] = []

    def note(where: str, what: str) -> None:
        found.append(Difference(name, where, what))

    def same(where: str, a: object, b: object) -> None:
        if a != b:
            note(where, f"upstream {_show(a)}, ours {_show(b)}")

    same("metadata.name", upstream["metadata"]["name"], ours.get("metadata", {}).get("name"))
    same("apiVersion", upstream["apiVersion"], ours.get("apiVersion"))
    up_spec, our_spec = upstream["spec"], ours.get("spec", {})
    for key in ("group", "scope", "preserveUnknownFields", "conversion"):
        same(f"spec.{key}", up_spec.get(key), our_spec.get(key))
    for key in sorted(set(up_spec["names"]) | set(our_spec.get("names", {}))):
        same(f"spec.names.{key}", up_spec["names"].get(key), our_spec.get("names", {}).get(key))
    theirs = {v["name"]: v for v in up_spec["versions"]}
    mine = {v["name"]: v for v in our_spec.get("versions", [])}
    same("spec.versions[*].name", list(theirs), list(mine))
    for version in theirs.keys() & mine.keys():
        up, me = theirs[version], mine[version]
        at = f"spec.versions[{version}]"
        for key in VERSION_KEYS:
            same(f"{at}.{key}", up.get(key), me.get(key))
        same(f"{at}.additionalPrinterColumns", _bare(up.get("additionalPrinterColumns", [])), _bare(me.get("additionalPrinterColumns", [])))
        for where, what in schema_differences(up["schema"]["openAPIV3Schema"], me.get("schema", {}).get("openAPIV3Schema", {})):
            note(f"{at} {where}", what)
    return found


# --- which fields an object uses -------------------------------------------------------------------


def leaf_paths(schema: Mapping[str, Any], path: str = "$") -> set[str]:
    """The path of every field a schema declares that holds no declared fields of its own."""
    properties = schema.get("properties")
    if properties:
        return {leaf for name, sub in properties.items() for leaf in leaf_paths(sub, f"{path}.{name}")}
    for key, mark in (("items", "[*]"), ("additionalProperties", ".*")):
        if isinstance(schema.get(key), Mapping):
            return leaf_paths(schema[key], path + mark)
    return {path}


def value_paths(value: object, path: str = "$", *, maps: frozenset[str] = frozenset()) -> set[str]:
    """The path of every leaf of a JSON value, in :func:`leaf_paths`' notation; an object at a path
    in ``maps`` is a map, whose keys are ``*``."""
    if isinstance(value, Mapping):
        if path in maps:
            return {leaf for item in value.values() for leaf in value_paths(item, path + ".*", maps=maps)} or {path + ".*"}
        return {leaf for key, item in value.items() for leaf in value_paths(item, f"{path}.{key}", maps=maps)} or {path}
    if isinstance(value, list):
        return {leaf for item in value for leaf in value_paths(item, path + "[*]", maps=maps)} or {path + "[*]"}
    return {path}


def map_paths(schema: Mapping[str, Any], path: str = "$") -> frozenset[str]:
    """The paths of a schema's maps (objects whose values are described by ``additionalProperties``)."""
    found: set[str] = set()
    if isinstance(schema.get("additionalProperties"), Mapping):
        found.add(path)
        found |= map_paths(schema["additionalProperties"], path + ".*")
    for name, sub in schema.get("properties", {}).items():
        found |= map_paths(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), Mapping):
        found |= map_paths(schema["items"], path + "[*]")
    return frozenset(found)
