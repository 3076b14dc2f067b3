"""``PDict``, the state's persistent map, read as the immutable mapping it stands for.

Each property is checked against a plain ``dict`` holding the same entries. The keys mix small
integers with integers whose low 20 or 30 hash bits agree (an ``int`` hashes to itself), so
maps of a few hundred entries split their leaves at every depth, and past the last one
(``MAX_DEPTH``) a leaf grows without splitting, with the library's own ``LEAF_MAX``.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.persistent.pdict import LEAF_MAX, PDict, discard_in, empty, pdict, set_in, update_in

KEYS = st.one_of(
    st.integers(-50, 700),
    st.integers(0, 400).map(lambda i: i << 20),
    st.integers(0, 400).map(lambda i: i << 30),
)
ENTRIES = st.dictionaries(KEYS, st.integers(-3, 3), max_size=700)


class Anything:
    """Equal to every value: an ``==`` that a map should let answer for itself."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


def as_dict(value: PDict[int, int]) -> dict[int, int]:
    return dict(value.items())


def test_the_empty_map_is_false_and_one_with_an_entry_true() -> None:
    nothing: PDict[int, int] = empty()
    assert not nothing and not pdict({}) and len(nothing) == 0
    assert pdict({0: 0}) and nothing.set(0, 0)
    assert not pdict({0: 0}).discard(0)


def test_a_missing_key_raises_key_error_naming_it_and_a_none_value_is_present() -> None:
    entries = pdict({1: None, 2: 0})
    assert 1 in entries and entries[1] is None and entries.get(1, 5) is None
    assert 3 not in entries and entries.get(3) is None and entries.get(3, 5) == 5
    try:
        entries[3]
    except KeyError as error:
        assert error.args == (3,)
    else:
        raise AssertionError("no KeyError")


def test_repr_shows_the_entries() -> None:
    assert repr(pdict({"a": 1})) == "PDict({'a': 1})"
    assert repr(empty()) == "PDict({})"


def test_a_map_compared_with_another_kind_of_value_lets_that_value_answer() -> None:
    entries = pdict({1: 2})
    assert entries == Anything() and Anything() == entries
    assert entries != {1: 2} and entries != 1
    assert not (entries == {1: 2})


def test_maps_of_as_many_none_values_under_other_keys_differ() -> None:
    assert pdict({1: None}) != pdict({2: None}) and pdict({2: None}) != pdict({1: None})
    assert pdict({1: None, 2: 0}) != pdict({1: None, 3: 0}) and pdict({1: None}) == pdict({1: None})


@given(ENTRIES, ENTRIES)
def test_maps_are_equal_and_hash_alike_exactly_when_their_entries_are(a: dict[int, int], b: dict[int, int]) -> None:
    left, right = pdict(a), pdict(b)
    assert (left == right) == (a == b) and (right == left) == (a == b)
    assert (left != right) == (a != b)
    assert left == left and left == pdict(a)
    assert hash(left) == hash(pdict(list(a.items())))
    assert hash(left) == hash(frozenset(a.items()))


@given(ENTRIES, st.data())
def test_a_map_is_never_equal_to_a_smaller_or_larger_one_holding_part_of_it(
    entries: dict[int, int], data: st.DataObject
) -> None:
    if not entries:
        return
    key = data.draw(st.sampled_from(sorted(entries)))
    full = pdict(entries)
    part = full.discard(key)
    assert full != part and part != full
    assert part == pdict({k: v for k, v in entries.items() if k != key})


@given(ENTRIES)
def test_a_map_built_at_once_reads_as_its_dict(entries: dict[int, int]) -> None:
    built = pdict(entries)
    assert len(built) == len(entries) and bool(built) == bool(entries)
    assert sorted(built) == sorted(entries) == sorted(built.keys())
    assert sorted(built.values()) == sorted(entries.values())
    assert as_dict(built) == entries
    assert all(k in built and built[k] == v and built.get(k) == v for k, v in entries.items())
    assert (1 << 50) not in built and built.get(1 << 50) is None


OPS = st.lists(st.tuples(st.sampled_from(["set", "discard", "same"]), KEYS, st.integers(-3, 3)), max_size=900)


@given(ENTRIES, OPS)
def test_updates_read_as_the_same_updates_of_a_dict_and_leave_the_older_map_alone(
    start: dict[int, int], ops: list[tuple[str, int, int]]
) -> None:
    reference = dict(start)
    current = pdict(start)
    for op, key, value in ops:
        before, expected = current, dict(reference)
        if op == "set":
            reference[key] = value
            current = current.set(key, value)
        elif op == "discard":
            absent = key not in reference
            reference.pop(key, None)
            current = current.discard(key)
            assert (current is before) == absent, "the same map when the key is absent"
        elif key in reference:  # set a key to the very value it holds
            current = current.set(key, current[key])
            assert current is before
        assert as_dict(before) == expected and len(before) == len(expected)
    assert as_dict(current) == reference and len(current) == len(reference)
    assert all(current[k] == v for k, v in reference.items())
    assert current == pdict(reference) and hash(current) == hash(pdict(reference))
    assert pdict(start) == pdict(dict(start)), "the first map is untouched"


NESTED_KEYS = st.sampled_from([0, 1, 2, 33, 1 << 20, 1 << 30, 2 << 30])
NESTED_OPS = st.lists(
    st.tuples(st.sampled_from(["set", "discard", "update"]), NESTED_KEYS, st.integers(0, 3)), max_size=300
)


@given(NESTED_OPS)
def test_nested_updates_read_as_a_dict_of_dicts_and_keep_no_empty_inner_map(
    ops: list[tuple[str, int, int]],
) -> None:
    """``set_in`` / ``discard_in`` / ``update_in`` on a map of maps (a few outer keys, inner
    names 0..3; ``update_in`` counts up to 3 and removes the entry past it)."""
    reference: dict[int, dict[int, int]] = {}
    current: PDict[int, PDict[int, int]] = empty()
    for op, key, name in ops:
        before, expected = current, {k: dict(v) for k, v in reference.items()}
        inner = reference.get(key, {})
        if op == "set":
            value = name  # the value is the name: setting it again changes nothing
            unchanged = inner.get(name) == value
            reference.setdefault(key, {})[name] = value
            current = set_in(current, key, name, value)
        elif op == "discard":
            unchanged = name not in inner
            inner.pop(name, None)
            current = discard_in(current, key, name)
        else:
            old = inner.get(name)
            new = None if old == 3 else (old or 0) + 1
            unchanged = False
            if new is None:
                del inner[name]
            else:
                reference.setdefault(key, {})[name] = new
            current = update_in(current, key, name, lambda v: None if v == 3 else (v or 0) + 1)
            kept = update_in(current, key, name, lambda v: v)
            assert kept is current, "the same map when the change keeps the value"
        if key in reference and not reference[key]:
            del reference[key]
        if unchanged:
            assert current is before
        assert {k: as_dict(v) for k, v in before.items()} == expected and len(before) == len(expected)
    assert {k: as_dict(v) for k, v in current.items()} == reference
    assert len(current) == len(reference) and all(current.values())
    assert all(len(current[k]) == len(v) for k, v in reference.items())
    assert current == pdict({k: pdict(v) for k, v in reference.items()})


def test_removing_one_inner_entry_keeps_the_others_under_that_key() -> None:
    nested: PDict[int, PDict[int, int]] = set_in(set_in(set_in(empty(), 1, 1, 1), 1, 2, 2), 3, 1, 1)
    dropped = update_in(nested, 1, 1, lambda v: None)
    assert {k: as_dict(v) for k, v in dropped.items()} == {1: {2: 2}, 3: {1: 1}}
    assert {k: as_dict(v) for k, v in discard_in(nested, 1, 2).items()} == {1: {1: 1}, 3: {1: 1}}
    assert {k: as_dict(v) for k, v in update_in(dropped, 1, 2, lambda v: None).items()} == {3: {1: 1}}


def test_update_in_removing_an_absent_entry_returns_the_same_map() -> None:
    nested: PDict[int, PDict[int, int]] = set_in(empty(), 1, 1, 1)
    assert update_in(nested, 2, 1, lambda v: None) is nested
    assert update_in(nested, 1, 2, lambda v: None) is nested
    assert discard_in(nested, 2, 1) is nested


def test_a_leaf_past_its_limit_splits_and_still_reads_as_its_dict() -> None:
    entries = {i: i for i in range(LEAF_MAX + 1)}
    grown: PDict[int, int] = empty()
    nested: PDict[int, PDict[int, int]] = empty()
    for key, value in entries.items():
        grown = grown.set(key, value)
        nested = set_in(nested, key, 0, value)
    assert as_dict(grown) == entries and grown == pdict(entries)
    assert {k: as_dict(v) for k, v in nested.items()} == {k: {0: v} for k, v in entries.items()}
    assert len(nested) == LEAF_MAX + 1


def constant(value: int) -> Callable[[int | None], int | None]:
    return lambda _: value


def test_keys_alike_in_every_hash_bit_the_trie_uses_grow_one_leaf_past_its_limit() -> None:
    """300 keys whose low 30 bits are 0 share the leaf at ``MAX_DEPTH``; 300 more whose low 20
    are split at depth 4, and 299 whose low 5 bits are 0 sit in leaves at depth 2; each added,
    read and removed one by one and built at once."""
    keys = [i << 30 for i in range(300)] + [(i << 20) + 1 for i in range(300)] + [i << 5 for i in range(1, 300)]
    grown: PDict[int, int] = empty()
    nested: PDict[int, PDict[int, int]] = empty()
    for n, key in enumerate(keys):
        grown = grown.set(key, n)
        nested = set_in(nested, key, 0, n) if n % 2 else update_in(nested, key, 0, constant(n))
    expected = {key: n for n, key in enumerate(keys)}
    assert as_dict(grown) == expected and grown == pdict(expected) and pdict(expected) == grown
    assert all(grown[k] == v for k, v in expected.items())
    assert {k: as_dict(v) for k, v in nested.items()} == {k: {0: v} for k, v in expected.items()}
    assert all(k in nested and as_dict(nested[k]) == {0: v} for k, v in expected.items())
    for key in keys[::2]:
        del expected[key]
        grown = grown.discard(key)
        nested = discard_in(nested, key, 0)
    assert as_dict(grown) == expected and len(grown) == len(expected) == len(nested)
    assert {k: as_dict(v) for k, v in nested.items()} == {k: {0: v} for k, v in expected.items()}
    assert all(k in nested and as_dict(nested[k]) == {0: v} for k, v in expected.items())
    assert not any(k in nested or k in grown for k in keys[::2])
