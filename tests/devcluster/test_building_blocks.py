"""The dev cluster's pure pieces in isolation: selector grammar, JSONPath cells, patches, schemas, ages."""

from __future__ import annotations

from typing import Any

import pytest

from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.patches import json_patch, merge_patch
from kruntimes.devcluster.resources import KRUNTIMES_RESOURCES, crd_manifest, definitions_from_crd
from kruntimes.devcluster.schema import apply_schema
from kruntimes.devcluster.selectors import parse_field_selector, parse_label_selector
from kruntimes.devcluster.tables import compile_jsonpath, table
from kruntimes.devcluster.times import human_duration

LABELS: dict[str, str] = {"tier": "gold", "zone": "blue", "n": "5"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("tier=gold", True),
        ("tier==gold", True),
        ("tier!=gold", False),
        ("absent!=x", True),
        ("tier in (gold,silver)", True),
        ("tier in ( silver , bronze )", False),
        ("tier notin (silver)", True),
        ("absent notin (x)", True),
        ("tier", True),
        ("!tier", False),
        ("!absent", True),
        ("tier=gold,zone=red", False),
        ("n>4,n<6", True),
        ("example.com/team=", False),
        ("absent=", False),
    ],
)
def test_label_selector_grammar_and_semantics(selector: str, matches: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is matches


@pytest.mark.parametrize("bad", ["tier in gold", "tier in ()", "=gold", "tier=gold,", "tier gold", "tier>x", "-bad-=x", "tier in (a", "a=b=c"])
def test_malformed_label_selectors_are_bad_requests(bad: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_label_selector(bad)
    assert refused.value.code == 400


def test_field_selectors_unescape_values_and_refuse_unknown_fields() -> None:
    selector = parse_field_selector(r"metadata.name=a\,b,spec.runtime!=node", {"metadata.name", "spec.runtime"}.__contains__)
    assert selector.matches({"metadata": {"name": "a,b"}, "spec": {"runtime": "python"}})
    assert selector.exact_name() == "a,b"
    with pytest.raises(ApiError):
        parse_field_selector("spec.other=x", {"metadata.name"}.__contains__)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".status.phase", ["Running"]),
        ("{.spec.runtime}", ["python"]),
        (".status.conditions[0].type", ["Ready"]),
        (".status.conditions[-1].type", ["kruntimes.io/RuntimedReady"]),
        ('.status.conditions[?(@.type=="kruntimes.io/RuntimedReady")].status', ["False"]),
        (".status.conditions[*].type", ["Ready", "kruntimes.io/RuntimedReady"]),
        (".metadata.annotations['kruntimes.io/capacity.runs']", ["2"]),
        (".missing.field", []),
    ],
)
def test_jsonpath_subset_used_by_printer_columns(path: str, expected: list[Any]) -> None:
    obj = {
        "metadata": {"annotations": {"kruntimes.io/capacity.runs": "2"}},
        "spec": {"runtime": "python"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, {"type": "kruntimes.io/RuntimedReady", "status": "False"}]},
    }
    assert compile_jsonpath(path)(obj) == expected


def test_a_run_table_row_has_phase_assigned_pod_runtime_and_age() -> None:
    run_def = KRUNTIMES_RESOURCES[0]
    obj = {"metadata": {"name": "r", "creationTimestamp": "2025-01-01T00:00:00Z"}, "spec": {"runtime": "python"}, "status": {"phase": "Scheduled", "assignedPod": "python-0"}}
    rendered = table(run_def, [obj], now=1735689600 + 75)
    assert rendered["rows"][0]["cells"] == ["r", "Scheduled", "python-0", "python", "75s"]


@pytest.mark.parametrize(("seconds", "shown"), [(5, "5s"), (119, "119s"), (150, "2m30s"), (600, "10m"), (3 * 3600 + 60, "3h1m"), (30 * 3600, "30h"), (3 * 86400, "3d"), (400 * 86400, "400d")])
def test_ages_read_like_kubectls(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": {"b": 1, "c": 2}, "d": [1, 2]}
    assert merge_patch(target, {"a": {"b": None, "e": 3}, "d": [3]}) == {"a": {"c": 2, "e": 3}, "d": [3]}
    assert target == {"a": {"b": 1, "c": 2}, "d": [1, 2]}


def test_json_patch_follows_rfc_6902() -> None:
    doc = {"a": [1, 2], "b": {"c": 1}}
    ops = [
        {"op": "add", "path": "/a/1", "value": 9},
        {"op": "add", "path": "/a/-", "value": 3},
        {"op": "move", "from": "/b/c", "path": "/d"},
        {"op": "copy", "from": "/d", "path": "/e"},
        {"op": "test", "path": "/e", "value": 1},
        {"op": "remove", "path": "/b"},
    ]
    assert json_patch(doc, ops) == {"a": [1, 9, 2, 3], "d": 1, "e": 1}
    with pytest.raises(ApiError):
        json_patch(doc, [{"op": "remove", "path": "/nope"}])


def test_schema_prunes_undeclared_fields_and_reports_types_and_immutability() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"size": {"type": "integer"}, "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "is immutable"}]}},
            },
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    report = apply_schema(schema, {"metadata": {"name": "x"}, "spec": {"size": 1, "extra": 2}, "status": {"any": 1}}, None)
    assert report.value == {"metadata": {"name": "x"}, "spec": {"size": 1}, "status": {"any": 1}}
    assert report.unknown == ["spec.extra"]
    wrong = apply_schema(schema, {"spec": {"size": "big", "name": "a"}}, {"spec": {"size": 1, "name": "a"}})
    assert [(e.reason, e.field) for e in wrong.errors] == [("FieldValueTypeInvalid", "spec.size"), ("FieldValueInvalid", "<nil>")]
    changed = apply_schema(schema, {"spec": {"size": 2, "name": "b"}}, {"spec": {"size": 1, "name": "a"}})
    assert [(e.field, e.detail) for e in changed.errors] == [("spec.name", 'Invalid value: "b": is immutable')]


@pytest.mark.parametrize("length", [8, 300], ids=["short value (remembered)", "long value (checked each time)"])
def test_a_pattern_verdict_belongs_to_its_value_however_often_the_same_values_are_written(length: int) -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$"},
        "other": {"type": "string", "pattern": "^[0-9]+$"},
    }}}}
    good, bad, digits = "a" * length, "a" * (length - 1) + "A", "7" * length
    for _ in range(3):  # the second and third writes must judge as the first did
        assert apply_schema(schema, {"spec": {"name": good, "other": digits}}, None).errors == []
        failed = apply_schema(schema, {"spec": {"name": bad, "other": good}}, None).errors
        assert sorted(error.field for error in failed) == ["spec.name", "spec.other"]


def test_the_kruntimes_table_round_trips_through_a_crd_manifest() -> None:
    for definition in KRUNTIMES_RESOURCES:
        (back,) = definitions_from_crd(crd_manifest([definition]))
        assert back == definition


def test_a_crd_whose_name_does_not_match_its_names_is_invalid() -> None:
    manifest = crd_manifest([KRUNTIMES_RESOURCES[0]])
    manifest["metadata"]["name"] = "wrong.kruntimes.io"
    with pytest.raises(ApiError) as refused:
        definitions_from_crd(manifest)
    assert refused.value.code == 422
