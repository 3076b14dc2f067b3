"""Kubernetes' protobuf encoding, read for the one kind kubectl sends in no other form: Namespace.

client-go's generated clients for built-in kinds send ``application/vnd.kubernetes.protobuf``
and do not retry a 415 as JSON (client-go falls back to JSON only from CBOR), so
``kubectl create namespace`` fails against a server that reads JSON alone. Every other kubectl
verb the dev cluster serves (``create -f``, ``apply``, ``get``, ``delete``, ``patch``,
``label``) goes through the dynamic client, in JSON.

The body is the 4 bytes ``k8s\\0`` and a ``runtime.Unknown`` message: ``typeMeta`` (1:
``apiVersion`` 1, ``kind`` 2), ``raw`` (2, the object's own message), ``contentEncoding`` (3),
``contentType`` (4). Field numbers are those of k8s.io/api's ``generated.proto``. Only what a
client may set is read: ObjectMeta's name, generateName, namespace, uid, resourceVersion,
labels, annotations, ownerReferences and finalizers; the Namespace's ``spec.finalizers``.
"""

from __future__ import annotations

from typing import Final

from kruntimes.devcluster import errors
from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.types import Obj

MEDIA_TYPE: Final = "application/vnd.kubernetes.protobuf"
_MAGIC: Final = b"k8s\x00"
Field = tuple[int, int | bytes]


def _malformed(why: str) -> ApiError:
    return errors.bad_request(f"the object provided is unrecognized: invalid protobuf body: {why}")


def _varint(data: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 70:
        if i >= len(data):
            raise _malformed("truncated varint")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & (2**64 - 1), i
        shift += 7
    raise _malformed("varint longer than 10 bytes")


def fields(data: bytes) -> list[Field]:
    """The (field number, value) pairs of one message: varints as ints, everything else as bytes."""
    out: list[Field] = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _malformed("field number 0")
        value: int | bytes
        if wire == 0:
            value, i = _varint(data, i)
        elif wire in (1, 2, 5):
            if wire == 2:
                size, i = _varint(data, i)
            else:
                size = 8 if wire == 1 else 4
            if i + size > len(data):
                raise _malformed("truncated field")
            value, i = data[i : i + size], i + size
        else:
            raise _malformed(f"unsupported wire type {wire}")
        out.append((number, value))
    return out


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise _malformed("a string field holds a number")
    return value.decode("utf-8", "replace")


def _message(value: int | bytes) -> list[Field]:
    if not isinstance(value, bytes):
        raise _malformed("a message field holds a number")
    return fields(value)


def _int64(value: int | bytes) -> int:
    if not isinstance(value, int):
        raise _malformed("a number field holds bytes")
    return value - 2**64 if value >= 2**63 else value


def _map_entry(value: int | bytes) -> tuple[str, str]:
    key = text = ""
    for number, part in _message(value):
        if number == 1:
            key = _text(part)
        elif number == 2:
            text = _text(part)
    return key, text


def _owner_reference(value: int | bytes) -> Obj:
    names = {5: "apiVersion", 1: "kind", 3: "name", 4: "uid"}
    flags = {6: "controller", 7: "blockOwnerDeletion"}
    ref: Obj = {}
    for number, part in _message(value):
        if number in names:
            ref[names[number]] = _text(part)
        elif number in flags:
            ref[flags[number]] = _int64(part) != 0
    return ref


def _object_meta(value: int | bytes) -> Obj:
    strings = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    meta: Obj = {}
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owners: list[Obj] = []
    finalizers: list[str] = []
    for number, part in _message(value):
        if number in strings:
            if text := _text(part):
                meta[strings[number]] = text
        elif number == 11:
            labels.update([_map_entry(part)])
        elif number == 12:
            annotations.update([_map_entry(part)])
        elif number == 13:
            owners.append(_owner_reference(part))
        elif number == 14:
            finalizers.append(_text(part))
    for key, items in (("labels", labels), ("annotations", annotations), ("ownerReferences", owners), ("finalizers", finalizers)):
        if items:
            meta[key] = items
    return meta


def _namespace(raw: bytes) -> Obj:
    obj: Obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {}}
    for number, part in fields(raw):
        if number == 1:
            obj["metadata"] = _object_meta(part)
        elif number == 2:
            finalizers = [_text(p) for n, p in _message(part) if n == 1]
            if finalizers:
                obj["spec"] = {"finalizers": finalizers}
    return obj


def decode(body: bytes, api_version: str, kind: str) -> Obj:
    """The JSON form of a protobuf ``body`` sent for ``api_version``/``kind``; 415 for any kind but a v1 Namespace."""
    if (api_version, kind) != ("v1", "Namespace"):
        raise ApiError(
            "UnsupportedMediaType",
            f'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ("{MEDIA_TYPE}" given; the dev cluster reads protobuf only for namespaces)',
        )
    if not body.startswith(_MAGIC):
        raise _malformed("it does not start with the k8s envelope")
    type_meta: tuple[str, str] = ("", "")
    raw = b""
    for number, part in fields(body[len(_MAGIC) :]):
        if number == 1:
            meta = dict(_message(part))
            type_meta = (_text(meta.get(1, b"")), _text(meta.get(2, b"")))
        elif number == 2:
            if not isinstance(part, bytes):
                raise _malformed("raw holds a number")
            raw = part
        elif number == 3 and _text(part):
            raise _malformed(f"content encoding {_text(part)!r} is not supported")
    if type_meta != (api_version, kind):
        raise errors.bad_request(f'the API version in the data ({"/".join(type_meta)}) does not match the expected API version ({api_version}/{kind})')
    return _namespace(raw)
