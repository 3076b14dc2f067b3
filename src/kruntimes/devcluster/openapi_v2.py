"""``/openapi/v2``: the Swagger 2.0 document, as JSON or as the protobuf kubectl asks for first.

kubectl still reads OpenAPI v2 where v3 has no answer: to validate a
``kind: List`` (the ``v1/List`` kind has no v3 entry, so kubectl validates the
items client side against v2 definitions) and as ``kubectl explain``'s
fallback. client-go fetches it with ``Accept:
application/com.github.proto-openapi.spec.v2@v1.0+protobuf`` and decodes the
gnostic ``openapi.v2.Document`` message, so this module also carries a small
protobuf writer for the part of that message kubectl reads: ``swagger``,
``info`` and ``definitions`` (each with its ``x-kubernetes-group-version-kind``).
``paths`` are in the JSON form only.

Definitions follow how kube-apiserver publishes CRD schemas in v2: ``nullable``,
the ``anyOf``/``oneOf``/``allOf``/``not`` combinators and CEL rules are left
out (v2 cannot say them), an ``x-kubernetes-int-or-string`` node has no
``type``, and a node with ``x-kubernetes-preserve-unknown-fields`` loses its
``properties`` so that client-side validation does not call its unknown fields
errors.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, Final

import yaml

from kruntimes.devcluster.resources import ResourceDef
from kruntimes.devcluster.types import Obj

PROTOBUF: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
"""The response type (kube-openapi's; the ``...v2@v1.0+protobuf`` clients send in Accept is not a valid media type)."""
_DROPPED: Final = frozenset(("nullable", "anyOf", "oneOf", "allOf", "not", "x-kubernetes-validations"))


def v2_schema(schema: Any) -> Any:
    """One OpenAPI v3 (structural) schema node as kube-apiserver publishes it in v2."""
    if not isinstance(schema, dict):
        return schema
    out: Obj = {}
    for key, value in schema.items():
        if key in _DROPPED:
            continue
        if key == "properties" and isinstance(value, dict):
            if schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            out[key] = {k: v2_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = v2_schema(value)
        elif key == "type" and schema.get("x-kubernetes-int-or-string"):
            continue
        else:
            out[key] = value
    return out


def definition(rd: ResourceDef) -> Obj:
    schema: Obj = dict(v2_schema(rd.schema)) if rd.schema else {"type": "object"}
    schema.pop("x-kubernetes-preserve-unknown-fields", None)
    if "properties" in schema or not rd.schema:
        props = dict(schema.get("properties") or {})
        props.update(apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"})
        schema["properties"] = props
        if not rd.schema:
            schema.pop("properties")  # a built-in kind: any fields (the dev cluster does not model their schemas)
    schema["x-kubernetes-group-version-kind"] = [{"group": rd.group, "kind": rd.kind, "version": rd.version}]
    return schema


def document(defs: Iterable[ResourceDef], schema_id: Any, version: str) -> Obj:
    definitions: Obj = {}
    paths: Obj = {}
    for rd in defs:
        definitions[schema_id(rd)] = definition(rd)
        ref = {"$ref": f"#/definitions/{schema_id(rd)}"}
        base = f"/{rd.group_version_path}"
        scope = f"{base}/namespaces/{{namespace}}/{rd.plural}" if rd.namespaced else f"{base}/{rd.plural}"
        gvk = {"group": rd.group, "version": rd.version, "kind": rd.kind}
        op = {"responses": {"200": {"description": "OK", "schema": ref}}, "x-kubernetes-group-version-kind": gvk}
        paths[scope] = {"get": {**op, "x-kubernetes-action": "list"}, "post": {**op, "x-kubernetes-action": "post"}}
        paths[f"{scope}/{{name}}"] = {verb: {**op, "x-kubernetes-action": verb} for verb in ("get", "put", "patch", "delete")}
    return {"swagger": "2.0", "info": {"title": "Kubernetes (kruntimes dev-cluster)", "version": version}, "paths": paths, "definitions": definitions}


# -- protobuf (gnostic openapi.v2.Document) ----------------------------------------------------


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _str(number: int, text: str) -> bytes:
    return _bytes_field(number, text.encode())


def _bool(number: int, flag: bool) -> bytes:
    return _varint(number << 3) + _varint(1 if flag else 0) if flag else b""


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _double(number: int, value: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", float(value))


def _any(value: Any) -> bytes:
    """gnostic ``Any``: the value as YAML text (field 2)."""
    return _str(2, yaml.safe_dump(value, default_flow_style=False, sort_keys=True))


def _named_any(name: str, value: Any) -> bytes:
    return _str(1, name) + _bytes_field(2, _any(value))


_STRINGS: Final = (("$ref", 1), ("format", 2), ("title", 3), ("description", 4), ("pattern", 13), ("discriminator", 26))
_DOUBLES: Final = (("multipleOf", 6), ("maximum", 7), ("minimum", 9))
_BOOLS: Final = (("exclusiveMaximum", 8), ("exclusiveMinimum", 10), ("uniqueItems", 16), ("readOnly", 27))
_INTS: Final = (("maxLength", 11), ("minLength", 12), ("maxItems", 14), ("minItems", 15), ("maxProperties", 17), ("minProperties", 18))


def schema_message(schema: Obj) -> bytes:
    """gnostic ``Schema`` (field numbers from OpenAPIv2.proto)."""
    out = bytearray()
    for key, number in _STRINGS:
        if isinstance(schema.get(key), str):
            out += _str(number, schema[key])
    if "default" in schema:
        out += _bytes_field(5, _any(schema["default"]))
    for key, number in _DOUBLES:
        if isinstance(schema.get(key), (int, float)):
            out += _double(number, schema[key])
    for key, number in _BOOLS:
        if schema.get(key) is True:
            out += _bool(number, True)
    for key, number in _INTS:
        if isinstance(schema.get(key), int):
            out += _int(number, schema[key])
    for name in schema.get("required") or ():
        out += _str(19, str(name))
    for value in schema.get("enum") or ():
        out += _bytes_field(20, _any(value))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out += _bytes_field(21, _bytes_field(1, schema_message(extra)))
    elif isinstance(extra, bool):
        out += _bytes_field(21, _varint(2 << 3) + _varint(1 if extra else 0))
    if isinstance(schema.get("type"), str):
        out += _bytes_field(22, _str(1, schema["type"]))
    if isinstance(schema.get("items"), dict):
        out += _bytes_field(23, _bytes_field(1, schema_message(schema["items"])))
    if isinstance(schema.get("properties"), dict):
        named = b"".join(_bytes_field(1, _str(1, k) + _bytes_field(2, schema_message(v))) for k, v in schema["properties"].items() if isinstance(v, dict))
        out += _bytes_field(25, named)
    if "example" in schema:
        out += _bytes_field(30, _any(schema["example"]))
    for key, value in schema.items():
        if key.startswith("x-"):
            out += _bytes_field(31, _named_any(key, value))
    return bytes(out)


def document_message(doc: Obj) -> bytes:
    """gnostic ``Document``: swagger (1), info (2), paths (8, left empty), definitions (9)."""
    info = doc.get("info", {})
    definitions = b"".join(_bytes_field(1, _str(1, name) + _bytes_field(2, schema_message(s))) for name, s in doc.get("definitions", {}).items())
    return (
        _str(1, str(doc.get("swagger", "2.0")))
        + _bytes_field(2, _str(1, str(info.get("title", ""))) + _str(2, str(info.get("version", ""))))
        + _bytes_field(8, b"")
        + _bytes_field(9, definitions)
    )
