"""Request bodies decoded with kube-apiserver's limits: size, nesting, YAML aliases, numbers JSON can hold.

kube-apiserver reads at most 3 MiB of a body (``--max-request-body-bytes``; more is a 413), decodes
YAML with go-yaml, which refuses a document whose alias expansion does most of the decoding work,
and decodes numbers into int64, else float64: a number no float64 holds (``1e999``) is refused,
and ``NaN``/``Infinity`` are not JSON at all. Python's decoders accept all of those (and PyYAML
shares aliased nodes, so an alias bomb costs nothing until something walks it), so this module
applies the server's rules itself, before any object reaches the store.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any, Final

import yaml
from yaml.constructor import ConstructorError

from kruntimes.devcluster import errors
from kruntimes.devcluster.errors import ApiError

MAX_BODY_BYTES: Final = 3 * 1024 * 1024
"""kube-apiserver's default ``--max-request-body-bytes``."""
MAX_BODY_DEPTH: Final = 128
"""How deeply objects and arrays may nest in a request body. kube-apiserver's decoder stops at 10000;
the dev cluster stops far earlier (real objects nest about 20 deep) so a hostile body cannot exhaust
Python's recursion limit anywhere downstream (schema walks, deep copies, patches)."""
_INT64: Final = (-(2**63), 2**63 - 1)
_SHOWN: Final = 40
"""Characters of an offending number quoted back in an error."""


def too_large(limit: int = MAX_BODY_BYTES) -> ApiError:
    return ApiError("RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def too_deep() -> ApiError:
    return errors.bad_request(f"the request body is nested too deeply: more than {MAX_BODY_DEPTH} levels of objects and arrays")


def check_depth(value: Any, limit: int = MAX_BODY_DEPTH) -> Any:
    """``value`` itself when it nests at most ``limit`` levels of objects/arrays; else a 400 (iterative, no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            raise too_deep()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return value


def short(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters: an error body stays small whatever the input."""
    return text if len(text) <= limit else text[:limit] + "..."


# -- JSON --------------------------------------------------------------------------------


def _not_a_number(name: str) -> Any:
    raise errors.bad_request(f"invalid JSON in request body: {name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise errors.bad_request(f"invalid JSON in request body: cannot unmarshal number {short(text, _SHOWN)} into a float64")
    return value


def _int(text: str) -> int | float:
    """int64 when it fits, else float64, as apimachinery decodes a number into an unstructured object."""
    if len(text) <= 20:  # int() of a longer digit string can be slow, and past 4300 digits raises
        value = int(text)
        if _INT64[0] <= value <= _INT64[1]:
            return value
    return _float(text)


def decode_json(body: bytes) -> Any:
    """A JSON request body as Python values (ints within int64, finite floats), or a 400."""
    try:
        return check_depth(json.loads(body or b"null", parse_constant=_not_a_number, parse_float=_float, parse_int=_int))
    except RecursionError:
        raise too_deep() from None
    except ValueError as exc:
        raise errors.bad_request(f"invalid JSON in request body: {short(str(exc))}") from None


# -- YAML --------------------------------------------------------------------------------

_ALIAS_RATIO_LOW: Final = 400_000
_ALIAS_RATIO_HIGH: Final = 4_000_000


def _allowed_alias_ratio(decodes: int) -> float:
    """go-yaml's ``allowedAliasRatio``: 99% of a small document's decoding may be alias expansion, 10% of a huge one's."""
    if decodes <= _ALIAS_RATIO_LOW:
        return 0.99
    if decodes >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decodes - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def check_aliases(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand too much, by go-yaml's rule, without expanding anything.

    go-yaml counts each node it decodes, and separately those decoded inside an alias, and fails
    once more than 100 nodes came from aliases, more than 1000 were decoded, and the aliased share
    exceeds :func:`_allowed_alias_ratio`. PyYAML composes an alias as the anchored node itself, so
    a walk in document order meets each anchored node first as its definition and again at each
    alias; an alias costs 1 + the expanded size of its node, known once that node is finished.
    Inside one expansion the aliased share only grows and the allowed ratio only falls, so checking
    after adding a whole expansion refuses exactly the documents go-yaml refuses.
    """
    sizes: dict[int, int] = {}  # id(node) -> nodes decoded to decode it, aliases inside expanded
    open_nodes: set[int] = set()
    decodes, aliased = 2, 0  # the document node and the root

    def check() -> None:
        if aliased > 100 and decodes > 1000 and aliased / decodes > _allowed_alias_ratio(decodes):
            raise errors.bad_request("invalid YAML in request body: yaml: document contains excessive aliasing")

    frames: list[tuple[yaml.Node, list[yaml.Node], list[int]]] = [(root, _children(root)[::-1], [1])]
    open_nodes.add(id(root))
    while frames:
        node, pending, total = frames[-1]
        if not pending:
            frames.pop()
            open_nodes.discard(id(node))
            sizes[id(node)] = total[0]
            if frames:
                frames[-1][2][0] += total[0]
            continue
        child = pending.pop()
        key = id(child)
        if key in sizes:
            expanded = sizes[key]
            decodes += 1 + expanded
            aliased += expanded
            total[0] += 1 + expanded
            check()
        elif key in open_nodes:
            raise errors.bad_request(f"invalid YAML in request body: yaml: anchor value contains itself{_mark(child)}")
        else:
            decodes += 1
            check()
            open_nodes.add(key)
            frames.append((child, _children(child)[::-1], [1]))


def _mark(node: yaml.Node) -> str:
    mark = node.start_mark
    return f" (line {mark.line + 1})" if mark is not None else ""


class _JSONishLoader(yaml.SafeLoader):
    """Safe YAML whose values JSON can hold, as sigs.k8s.io/yaml converts YAML to JSON.

    Timestamps stay the strings they were written as; ``!!binary`` is its decoded text; a
    ``!!set`` is a mapping to nulls and ``!!omap``/``!!pairs`` a list of one-entry mappings;
    keys become strings; an integer of more digits than int64 has is left to the JSON number
    rules (a float, or refused) instead of to ``int()``, which refuses 4300 digits with a
    ``ValueError`` of its own.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=deep)
        return {_key(k): v for k, v in mapping.items()}


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, (int, float)):
        return json.dumps(key)
    raise errors.bad_request(f"invalid YAML in request body: unsupported map key of type {type(key).__name__}: {short(repr(key), _SHOWN)}")


def _timestamp(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    assert isinstance(node, yaml.ScalarNode)
    return str(loader.construct_scalar(node))


def _binary(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    assert isinstance(node, yaml.ScalarNode)
    try:
        return base64.b64decode(str(loader.construct_scalar(node)).encode("ascii"), validate=False).decode("utf-8", "replace")
    except (binascii.Error, UnicodeEncodeError):
        raise ConstructorError(None, None, "!!binary value contains invalid base64 data", node.start_mark) from None


def _set(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    assert isinstance(node, yaml.MappingNode)
    data: dict[Any, Any] = {}
    yield data
    data.update((k, None) for k in loader.construct_mapping(node))


def _pairs(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    assert isinstance(node, yaml.SequenceNode)
    data: list[Any] = []
    yield data
    data.extend(loader.construct_object(item, deep=True) for item in node.value)


def _integer(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    assert isinstance(node, yaml.ScalarNode)
    text = str(loader.construct_scalar(node)).replace("_", "")
    digits = text.lstrip("+-")
    if len(digits) > 20 and digits.isascii() and digits.isdigit() and not digits.startswith("0"):  # decimal, not YAML 1.1 octal
        return _float(text)
    return loader.construct_yaml_int(node)


_JSONishLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp)
_JSONishLoader.add_constructor("tag:yaml.org,2002:binary", _binary)
_JSONishLoader.add_constructor("tag:yaml.org,2002:set", _set)
_JSONishLoader.add_constructor("tag:yaml.org,2002:omap", _pairs)
_JSONishLoader.add_constructor("tag:yaml.org,2002:pairs", _pairs)
_JSONishLoader.add_constructor("tag:yaml.org,2002:int", _integer)


def decode_yaml(body: bytes) -> Any:
    """A YAML request body as JSON values under the same limits as :func:`decode_json`, or a 400.

    The constructed value is re-encoded as JSON and decoded by :func:`decode_json`: that applies
    the number rules, refuses ``.nan``/``.inf``, and gives each alias its own copy (go-yaml
    decodes an alias again at each use; a shared dict would let a write to one place change
    another).
    """
    loader = _JSONishLoader(body)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_aliases(node)
        value = check_depth(loader.construct_document(node))
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        raise too_deep() from None
    except yaml.YAMLError as exc:
        raise errors.bad_request(f"invalid YAML in request body: {short(str(exc))}") from None
    except ValueError as exc:  # json.dumps: a float JSON cannot hold
        raise errors.bad_request(f"error converting YAML to JSON: {short(str(exc))}") from None
    finally:
        loader.dispose()
    return decode_json(text.encode())
