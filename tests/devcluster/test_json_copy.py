"""The dev cluster copies stored objects with ``json_copy``: equal, and sharing nothing mutable."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kruntimes.devcluster.types import json_copy

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=30,
)


def _containers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value, *(c for item in value.values() for c in _containers(item))]
    if isinstance(value, list):
        return [value, *(c for item in value for c in _containers(item))]
    return []


@given(json_values)
def test_a_copy_is_equal_and_shares_no_dict_or_list_with_the_original(value: Any) -> None:
    copied = json_copy(value)
    assert copied == value
    originals = {id(c) for c in _containers(value)}
    assert not originals & {id(c) for c in _containers(copied)}


def test_a_change_to_the_copy_never_reaches_the_stored_object() -> None:
    stored: dict[str, Any] = {"metadata": {"labels": {"a": "1"}}, "status": {"conditions": [{"type": "Ready"}]}}
    copied = json_copy(stored)
    copied["metadata"]["labels"]["a"] = "2"
    copied["status"]["conditions"][0]["type"] = "Gone"
    assert stored == {"metadata": {"labels": {"a": "1"}}, "status": {"conditions": [{"type": "Ready"}]}}


def test_values_json_does_not_have_are_still_copied_deeply() -> None:
    inner = {"x": [1]}
    copied = json_copy({"t": (inner,)})
    assert copied == {"t": (inner,)} and copied["t"][0] is not inner
