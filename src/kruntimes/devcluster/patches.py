"""The patch formats the API server accepts, applied to decoded JSON.

Merge patch is RFC 7386; JSON patch is RFC 6902. Strategic merge patch is
served as merge patch for built-in kinds (their list-merge keys are not
modelled) and refused with 415 for custom resources, as a real server does.
A JSON patch has kube-apiserver's bounds: at most 10000 operations (413), and
``copy`` operations may add at most 3 MiB of JSON between them (422), so a
short patch cannot double an object again and again.
"""

from __future__ import annotations

import json
from typing import Any, Final

from kruntimes.devcluster.errors import ApiError, bad_request, unsupported_media_type
from kruntimes.devcluster.types import json_copy

MERGE: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
STRATEGIC: Final = "application/strategic-merge-patch+json"
APPLY: Final = "application/apply-patch+yaml"
MAX_JSON_PATCH_OPERATIONS: Final = 10_000
"""kube-apiserver's ``maxJSONPatchOperations``."""
MAX_COPY_BYTES: Final = 3 * 1024 * 1024
"""kube-apiserver's ``JSONPatchMaxCopyBytes`` (json-patch's ``AccumulatedCopySizeLimit``)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _strip_directives(patch: Any) -> Any:
    """Drop strategic-merge directives (``$patch``, ``$retainKeys``, ``$setElementOrder/...``, ``$deleteFromPrimitiveList/...``)."""
    if isinstance(patch, dict):
        return {k: _strip_directives(v) for k, v in patch.items() if not k.startswith("$")}
    if isinstance(patch, list):
        return [_strip_directives(v) for v in patch]
    return patch


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _invalid_patch(f'JSON pointer "{path}" must start with "/"')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _invalid_patch(why: str) -> ApiError:
    return ApiError("Invalid", f"the server rejected our request due to an error in our request: {why}", code=422)


def _index(tok: str, size: int) -> int | None:
    """An array index token as RFC 6901 writes one (ASCII digits), when it is below ``size``."""
    if not (tok.isascii() and tok.isdigit()) or len(tok) > 18:
        return None
    index = int(tok)
    return index if index < size else None


def _step(cur: Any, tok: str, path: str) -> Any:
    """One JSON-pointer step into an object or an array; a missing step is an invalid patch."""
    if isinstance(cur, dict) and tok in cur:
        return cur[tok]
    if isinstance(cur, list) and (index := _index(tok, len(cur))) is not None:
        return cur[index]
    raise _invalid_patch(f"doc is missing path: {path}")


def _parent(doc: Any, tokens: list[str], path: str) -> tuple[Any, str]:
    cur = doc
    for tok in tokens[:-1]:
        cur = _step(cur, tok, path)
    return cur, tokens[-1]


def _get(doc: Any, path: str) -> Any:
    cur = doc
    for tok in _pointer(path):
        cur = _step(cur, tok, path)
    return cur


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise _invalid_patch("cannot remove the whole document")
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and (index := _index(last, len(parent))) is not None:
        return parent.pop(index)
    raise _invalid_patch(f"unable to remove nonexistent key: {last}: missing value")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif (index := _index(last, len(parent) + 1)) is not None:
            parent.insert(index, value)
        else:
            raise _invalid_patch(f"add operation index out of bounds: {last}")
    else:
        raise _invalid_patch(f"doc is missing path: {path}")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 over a deep copy of ``target``; a failed ``test`` or a missing path is 422."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    if len(operations) > MAX_JSON_PATCH_OPERATIONS:
        raise ApiError("RequestEntityTooLarge", f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(operations)}")
    doc = json_copy(target)
    copied = 0
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], str(op["path"])
        if kind == "add":
            doc = _add(doc, path, json_copy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            if _pointer(path):
                _remove(doc, path)
            doc = _add(doc, path, json_copy(op.get("value")))
        elif kind == "move":
            value = _remove(doc, str(op.get("from", "")))
            doc = _add(doc, path, value)
        elif kind == "copy":
            value = _get(doc, str(op.get("from", "")))
            copied += len(json.dumps(value, separators=(",", ":")))
            if copied > MAX_COPY_BYTES:
                raise _invalid_patch(f"Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {MAX_COPY_BYTES}")
            doc = _add(doc, path, json_copy(value))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise _invalid_patch(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"unexpected json patch operation: {kind}")
    return doc


def apply_patch(content_type: str, target: Any, patch: Any, *, custom: bool) -> Any:
    """Dispatch on the PATCH request's ``Content-Type`` (parameters already stripped)."""
    if content_type == MERGE:
        return merge_patch(target, patch)
    if content_type == JSON_PATCH:
        return json_patch(target, patch)
    if content_type == STRATEGIC and not custom:
        return merge_patch(target, _strip_directives(patch))
    raise unsupported_media_type(content_type)
