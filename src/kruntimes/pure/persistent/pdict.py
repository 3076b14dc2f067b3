"""``PDict``: the persistent hash map behind ``ClusterState``'s indexes (private).

Why not pyrsistent's ``PMap`` here: its lookups and iteration are many times
a dict's, and every update makes a new ``PVector`` of all buckets whose GC
traversal walks the whole map, so a large state paid for the collector on
every watch event (figures: docs/performance.md, "Design measurements").

The shape: a hash trie, fan-out 32, whose leaves are small plain dicts (at
most ``LEAF_MAX`` entries, split by the next 5 hash bits when they grow past
it). An update copies one leaf and the short path of tuples above it, so
every new object is small (cheap to copy, cheap for the collector to
traverse); a lookup is a couple of tuple indexings and one dict lookup;
iteration runs over the leaves' own ``dict`` views at C speed. Nodes are
never mutated once a ``PDict`` holding them exists: every update returns a new
``PDict`` sharing all untouched nodes. Iteration order is hash order (like any
map's): callers that need an order sort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain
from typing import Any, Final, Generic, TypeAlias, TypeVar, cast

K = TypeVar("K")
V = TypeVar("V")
_N = TypeVar("_N")

BITS: Final = 5
FANOUT: Final = 1 << BITS
MASK: Final = FANOUT - 1
LEAF_MAX: Final = 256
"""A leaf dict this size copies in well under a microsecond."""
MAX_DEPTH: Final = 6
"""Leaves at this depth grow without splitting (30 hash bits used: never in practice)."""

_Node: TypeAlias = "dict[object, object] | tuple[_Node, ...]"
_EMPTY_LEAF: Final[dict[object, object]] = {}
_MISSING: Final = object()


class PDict(Generic[K, V]):
    """An immutable mapping with O(log₃₂ n) path-copying ``set`` and ``discard``."""

    __slots__ = ("_root", "_len")

    _root: _Node
    _len: int

    def __init__(self, root: _Node, length: int) -> None:
        self._root = root
        self._len = length

    # --- reads ---------------------------------------------------------------------

    def get(self, key: K, default: V | None = None) -> V | None:
        # ``node`` is untyped and the answer goes through a typed local: the hottest
        # function of the package, where a ``cast`` call per lookup shows.
        node: Any = self._root
        found: V | None
        if type(node) is dict:
            found = node.get(key, default)
            return found
        h = hash(key)
        while True:
            node = node[h & MASK]
            if type(node) is dict:
                found = node.get(key, default)
                return found
            h >>= BITS

    def __getitem__(self, key: K) -> V:
        value = self.get(key, cast(V, _MISSING))
        if value is _MISSING:
            raise KeyError(key)
        return cast(V, value)

    def __contains__(self, key: object) -> bool:
        return self.get(cast(K, key), cast(V, _MISSING)) is not _MISSING

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def _leaves(self) -> list[dict[object, object]]:
        root = self._root
        if type(root) is dict:
            return [root]
        leaves: list[dict[object, object]] = []
        stack: list[_Node] = [root]
        while stack:
            node = stack.pop()
            if type(node) is dict:
                if node:
                    leaves.append(node)
            else:
                stack.extend(node)  # type: ignore[arg-type]
        return leaves

    def __iter__(self) -> Iterator[K]:
        return cast(Iterator[K], chain.from_iterable(self._leaves()))

    def keys(self) -> Iterator[K]:
        return iter(self)

    def values(self) -> Iterator[V]:
        return cast(Iterator[V], chain.from_iterable(map(dict.values, self._leaves())))

    def items(self) -> Iterator[tuple[K, V]]:
        return cast(Iterator[tuple[K, V]], chain.from_iterable(map(dict.items, self._leaves())))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, PDict) or len(other) != self._len:
            return NotImplemented if not isinstance(other, PDict) else False
        get = other.get
        return all(get(key, _MISSING) == value for key, value in self.items())

    def __hash__(self) -> int:
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        return f"PDict({dict(self.items())!r})"

    # --- updates ---------------------------------------------------------------------

    def set(self, key: K, value: V) -> PDict[K, V]:
        path, leaf = _locate(self._root, hash(key))
        old = leaf.get(key, _MISSING)
        if old is value:
            return self
        new = leaf.copy()
        new[key] = value
        if len(new) > LEAF_MAX:
            return PDict(_rebuild(path, _maybe_split(new, len(path))), self._len + (old is _MISSING))
        return PDict(_rebuild(path, new), self._len + (old is _MISSING))

    def discard(self, key: K) -> PDict[K, V]:
        """Without ``key`` (the same map when it is absent)."""
        path, leaf = _locate(self._root, hash(key))
        if key not in leaf:
            return self
        if len(leaf) == 1:
            return PDict(_rebuild(path, _EMPTY_LEAF), self._len - 1)
        new = leaf.copy()
        del new[key]
        return PDict(_rebuild(path, new), self._len - 1)


def set_in(outer: PDict[K, PDict[_N, V]], key: K, name: _N, value: V) -> PDict[K, PDict[_N, V]]:
    """``outer`` with ``outer[key][name] = value`` (the inner map created when missing),
    walking the outer map's path once."""
    path, leaf = _locate(outer._root, hash(key))
    inner = cast("PDict[_N, V] | None", leaf.get(key))
    updated: PDict[_N, V]
    if inner is None:
        updated = PDict(cast(_Node, {name: value}), 1)
    else:
        updated = inner.set(name, value)
        if updated is inner:
            return outer
    new = leaf.copy()
    new[key] = updated
    return PDict(_rebuild(path, _maybe_split(new, len(path))), outer._len + (inner is None))


def discard_in(outer: PDict[K, PDict[_N, V]], key: K, name: _N) -> PDict[K, PDict[_N, V]]:
    """``outer`` without ``outer[key][name]``; an inner map that empties is dropped."""
    path, leaf = _locate(outer._root, hash(key))
    inner = cast("PDict[_N, V] | None", leaf.get(key))
    if inner is None:
        return outer
    updated = inner.discard(name)
    if updated is inner:
        return outer
    new = leaf.copy()
    if updated:
        new[key] = updated
        return PDict(_rebuild(path, new), outer._len)
    del new[key]
    return PDict(_rebuild(path, new or _EMPTY_LEAF), outer._len - 1)


def update_in(
    outer: PDict[K, PDict[_N, V]], key: K, name: _N, change: Callable[[V | None], V | None]
) -> PDict[K, PDict[_N, V]]:
    """``outer`` with ``outer[key][name]`` replaced by ``change(old value or None)``;
    ``None`` removes the entry (and an inner map that empties). One walk of the outer
    map's path; the same map when ``change`` returns the old value."""
    path, leaf = _locate(outer._root, hash(key))
    inner = cast("PDict[_N, V] | None", leaf.get(key))
    old = None if inner is None else inner.get(name)
    value = change(old)
    if value is old:
        return outer
    new = leaf.copy()
    if value is None:
        updated = cast("PDict[_N, V]", inner).discard(name)
        if updated:
            new[key] = updated
            return PDict(_rebuild(path, new), outer._len)
        del new[key]
        return PDict(_rebuild(path, new or _EMPTY_LEAF), outer._len - 1)
    new[key] = PDict(cast(_Node, {name: value}), 1) if inner is None else inner.set(name, value)
    return PDict(_rebuild(path, _maybe_split(new, len(path))), outer._len + (inner is None))


_Branch: TypeAlias = "tuple[_Node, ...]"
_Path: TypeAlias = "tuple[tuple[_Branch, int], ...]"
"""From the root down: each branch node on the way and the child index taken."""


def _locate(root: _Node, h: int) -> tuple[_Path, dict[object, object]]:
    """The path from ``root`` to the leaf for hash ``h``, and that leaf.

    Unrolled for depths 0–2 (up to ~260k entries), which is every map in practice.
    """
    if type(root) is dict:
        return (), root
    branch = cast(_Branch, root)
    i = h & MASK
    child = branch[i]
    if type(child) is dict:
        return ((branch, i),), child
    inner = cast(_Branch, child)
    j = (h >> BITS) & MASK
    node = inner[j]
    if type(node) is dict:
        return ((branch, i), (inner, j)), node
    path = [(branch, i), (inner, j)]
    shift = 2 * BITS
    while type(node) is not dict:
        deeper = cast(_Branch, node)
        index = (h >> shift) & MASK
        path.append((deeper, index))
        node = deeper[index]
        shift += BITS
    return tuple(path), node


def _rebuild(path: _Path, node: _Node) -> _Node:
    if len(path) == 1:
        ((branch, index),) = path
        return _replaced(branch, index, node)
    if len(path) == 2:
        ((outer, i), (inner, j)) = path
        return _replaced(outer, i, _replaced(inner, j, node))
    for branch, index in reversed(path):
        node = _replaced(branch, index, node)
    return node


def _replaced(children: tuple[_Node, ...], index: int, node: _Node) -> tuple[_Node, ...]:
    """``children`` with ``children[index] = node`` (a list round trip: the cheapest copy)."""
    copy = list(children)
    copy[index] = node
    return tuple(copy)


def _maybe_split(leaf: dict[object, object], depth: int) -> _Node:
    if len(leaf) > LEAF_MAX and depth < MAX_DEPTH:  # rare: checked inline by the callers' hot paths
        return _split(leaf, depth)
    return leaf


def _split(leaf: dict[object, object], depth: int) -> _Node:
    """A full leaf at ``depth`` as a node of ``FANOUT`` leaves keyed by the next hash bits."""
    shift = BITS * depth
    buckets: list[dict[object, object]] = [{} for _ in range(FANOUT)]
    for key, value in leaf.items():
        buckets[(hash(key) >> shift) & MASK][key] = value
    return tuple(
        _split(bucket, depth + 1) if len(bucket) > LEAF_MAX and depth + 1 < MAX_DEPTH else (bucket or _EMPTY_LEAF)
        for bucket in buckets
    )


def pdict(items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> PDict[K, V]:
    """A ``PDict`` holding ``items`` (built in one pass, no per-entry path copying)."""
    leaf: dict[object, object] = dict(items)  # type: ignore[arg-type]
    if len(leaf) > LEAF_MAX:
        return PDict(_split(leaf, 0), len(leaf))
    return PDict(leaf or _EMPTY_LEAF, len(leaf))


EMPTY_PDICT: Final[PDict[object, object]] = PDict(_EMPTY_LEAF, 0)


def empty() -> PDict[K, V]:
    """The empty map, typed for the caller."""
    return cast("PDict[K, V]", EMPTY_PDICT)
