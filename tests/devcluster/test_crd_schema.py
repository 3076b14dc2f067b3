"""Structural schemas as kube-apiserver applies them: pruning, defaulting, each value validation, CEL rules.

The unit half drives :func:`apply_schema` with small schemas, one keyword at a time; the HTTP half
checks that create, update, patch, status writes and dry runs all go through it on a running dev
cluster serving the project's own CRDs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3
from celpy import celtypes

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.celrules import EXTENSIONS, compile_rule, split
from kruntimes.devcluster.errors import FieldError
from kruntimes.devcluster.bodies import MAX_BODY_DEPTH
from kruntimes.devcluster.resources import KRUNTIMES_RESOURCES, definitions_from_crd, kruntimes_crds
from kruntimes.devcluster.schema import apply_schema, compile_schema_rules, format_ok

from .helpers import GROUP, VERSION, Kube, request_json

RUNS = "/apis/kruntimes.io/v1alpha1/namespaces/default/runs"


def _spec_schema(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}


def _errors(schema: dict[str, Any], spec: Any, old: Any = None) -> list[tuple[str, str, str]]:
    report = apply_schema(schema, {"metadata": {"name": "x"}, "spec": spec}, None if old is None else {"metadata": {"name": "x"}, "spec": old})
    return [(e.reason, e.field, e.detail) for e in report.errors]


# -- pruning and defaulting ------------------------------------------------------------------------


def test_pruning_drops_undeclared_fields_but_keeps_preserved_and_additional_ones() -> None:
    schema = _spec_schema(
        known={"type": "string"},
        free={"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"a": {"type": "integer"}}},
        labels={"type": "object", "additionalProperties": {"type": "string"}},
        maybe={"type": "string", "nullable": True},
        never={"type": "string"},
    )
    report = apply_schema(schema, {"spec": {"known": "k", "extra": 1, "free": {"a": 1, "b": {"c": 2}}, "labels": {"x": "y"}, "maybe": None, "never": None}}, None)
    assert report.value == {"spec": {"known": "k", "free": {"a": 1, "b": {"c": 2}}, "labels": {"x": "y"}, "maybe": None}}
    assert report.unknown == ["spec.extra"]
    assert report.errors == []


def test_defaults_apply_at_every_depth_but_only_below_a_present_parent() -> None:
    schema = _spec_schema(
        workspace={"type": "object", "properties": {"name": {"type": "string"}, "kind": {"type": "string", "default": "PersistentWorkspace"}}},
        replicas={"type": "integer", "default": 1},
        nested={"type": "object", "default": {}, "properties": {"inner": {"type": "string", "default": "filled"}}},
        items={"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer", "default": 80}}}},
    )
    assert apply_schema(schema, {"spec": {}}, None).value == {"spec": {"replicas": 1, "nested": {"inner": "filled"}}}
    full = apply_schema(schema, {"spec": {"workspace": {"name": "w"}, "replicas": 3, "items": [{}, {"port": 1}]}}, None).value
    assert full["spec"]["workspace"] == {"name": "w", "kind": "PersistentWorkspace"}
    assert full["spec"]["replicas"] == 3 and full["spec"]["items"] == [{"port": 80}, {"port": 1}]
    # a non-nullable null is dropped, then defaulted
    assert apply_schema(schema, {"spec": {"replicas": None}}, None).value["spec"]["replicas"] == 1


# -- value validations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prop", "value", "reason", "detail"),
    [
        ({"type": "integer"}, "3", "FieldValueTypeInvalid", 'Invalid value: "string": spec.f in body must be of type integer: "string"'),
        ({"type": "integer"}, 1.5, "FieldValueTypeInvalid", 'Invalid value: "number": spec.f in body must be of type integer: "number"'),
        ({"type": "boolean"}, 1, "FieldValueTypeInvalid", 'Invalid value: "integer": spec.f in body must be of type boolean: "integer"'),
        ({"type": "string", "enum": ["a", "b"]}, "c", "FieldValueNotSupported", 'Unsupported value: "c": supported values: "a", "b"'),
        ({"type": "string", "pattern": "^[a-z]+$"}, "A1", "FieldValueInvalid", "Invalid value: \"A1\": spec.f in body should match '^[a-z]+$'"),
        ({"type": "string", "minLength": 2}, "a", "FieldValueInvalid", 'Invalid value: "a": spec.f in body should be at least 2 chars long'),
        ({"type": "string", "maxLength": 2}, "abc", "FieldValueTooLong", "Too long: may not be more than 2 bytes"),
        ({"type": "string", "format": "date-time"}, "yesterday", "FieldValueInvalid", 'Invalid value: "yesterday": spec.f in body must be of type date-time: "yesterday"'),
        ({"type": "string", "format": "byte"}, "not base64!", "FieldValueInvalid", 'Invalid value: "not base64!": spec.f in body must be of type byte: "not base64!"'),
        ({"type": "integer", "minimum": 1}, 0, "FieldValueInvalid", "Invalid value: 0: spec.f in body should be greater than or equal to 1"),
        ({"type": "integer", "minimum": 1, "exclusiveMinimum": True}, 1, "FieldValueInvalid", "Invalid value: 1: spec.f in body should be greater than 1"),
        ({"type": "integer", "maximum": 100}, 101, "FieldValueInvalid", "Invalid value: 101: spec.f in body should be less than or equal to 100"),
        ({"type": "number", "maximum": 1.5, "exclusiveMaximum": True}, 1.5, "FieldValueInvalid", "Invalid value: 1.5: spec.f in body should be less than 1.5"),
        ({"type": "integer", "multipleOf": 5}, 7, "FieldValueInvalid", "Invalid value: 7: spec.f in body should be a multiple of 5"),
        ({"type": "array", "maxItems": 1, "items": {"type": "string"}}, ["a", "b"], "FieldValueTooMany", "Too many: 2: must have at most 1 items"),
        ({"type": "array", "minItems": 1, "items": {"type": "string"}}, [], "FieldValueInvalid", "Invalid value: 0: spec.f in body should have at least 1 items"),
        ({"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}}, {"a": "1", "b": "2"}, "FieldValueTooMany", "Too many: 2: must have at most 1 items"),
        ({"type": "object", "minProperties": 1}, {}, "FieldValueInvalid", "Invalid value: 0: spec.f in body should have at least 1 properties"),
        ({"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}, True, "FieldValueTypeInvalid", 'Invalid value: true: spec.f in body must be of type integer or string: "boolean"'),
        ({"type": "string"}, None, "FieldValueTypeInvalid", None),
    ],
)
def test_each_value_validation_keyword_refuses_with_apimachinerys_wording(prop: dict[str, Any], value: Any, reason: str, detail: str | None) -> None:
    schema = _spec_schema(f={**prop, "nullable": False} if value is None else prop)
    if value is None:  # a non-nullable null is pruned, as on a real server: no error, no field
        assert _errors(schema, {"f": None}) == []
        assert apply_schema(schema, {"spec": {"f": None}}, None).value == {"spec": {}}
        return
    assert _errors(schema, {"f": value}) == [(reason, "spec.f", detail)]


def test_valid_values_pass_every_keyword() -> None:
    schema = _spec_schema(
        n={"type": "integer", "minimum": 1, "maximum": 100},
        s={"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$", "enum": ["abc"]},
        t={"type": "string", "format": "date-time"},
        q={"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": "^[0-9]+m?$"},
        nul={"type": "string", "nullable": True},
    )
    assert _errors(schema, {"n": 100, "s": "abc", "t": "2025-01-02T03:04:05.123Z", "q": 5, "nul": None}) == []
    assert _errors(schema, {"q": "500m"}) == []
    assert _errors(schema, {"q": "lots"})[0][:2] == ("FieldValueInvalid", "spec.q")


def test_required_nullable_and_nested_paths() -> None:
    schema = _spec_schema(
        env={"type": "array", "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
        requests={"type": "object", "additionalProperties": {"type": "string", "pattern": "^[0-9]+$"}},
    )
    schema["properties"]["spec"]["required"] = ["mode"]
    assert [(r, f) for r, f, _ in _errors(schema, {"env": [{"name": "a"}, {}], "requests": {"cpu": "x"}})] == [
        ("FieldValueRequired", "spec.mode"),
        ("FieldValueRequired", "spec.env[1].name"),
        ("FieldValueInvalid", "spec.requests[cpu]"),
    ]


def test_list_type_set_and_map_refuse_duplicates() -> None:
    schema = _spec_schema(
        tags={"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        conditions={"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}},
    )
    assert _errors(schema, {"tags": ["a", "b"], "conditions": [{"type": "A"}, {"type": "B"}]}) == []
    assert _errors(schema, {"tags": ["a", "a"], "conditions": [{"type": "A", "status": "x"}, {"type": "A", "status": "y"}]}) == [
        ("FieldValueDuplicate", "spec.tags[1]", 'Duplicate value: "a"'),
        ("FieldValueDuplicate", "spec.conditions[1]", 'Duplicate value: {"type":"A"}'),
    ]


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        ("date-time", ["2025-01-02T03:04:05Z", "2025-01-02T03:04:05.5+02:00"], ["2025-13-02T03:04:05Z", "2025-01-02", "now"]),
        ("date", ["2025-02-28"], ["2025-02-30", "2025-1-1"]),
        ("byte", ["aGVsbG8=", ""], ["aGVsbG8", "###"]),
        ("uuid", ["6ba7b810-9dad-11d1-80b4-00c04fd430c8"], ["6ba7b810"]),
        ("ipv4", ["10.0.0.1"], ["10.0.0.256"]),
        ("cidr", ["10.0.0.0/8"], ["10.0.0.0"]),
    ],
)
def test_string_formats_the_api_server_checks(name: str, good: list[str], bad: list[str]) -> None:
    assert all(format_ok(name, g) for g in good)
    assert not any(format_ok(name, b) for b in bad)
    assert format_ok("no-such-format", "anything")


# -- CEL rules -------------------------------------------------------------------------------------------


def _rule_schema(rule: dict[str, Any], **props: Any) -> dict[str, Any]:
    schema = _spec_schema(**props)
    schema["properties"]["spec"]["x-kubernetes-validations"] = [rule]
    return schema


def test_a_failing_rule_reports_its_message_at_its_place() -> None:
    """kube-apiserver prints no value for an object or a list a rule refuses, and a scalar's value."""
    schema = _rule_schema({"rule": "has(self.a) != has(self.b)", "message": " set exactly one of a and b "}, a={"type": "string"}, b={"type": "string"})
    assert _errors(schema, {"a": "x"}) == []
    assert _errors(schema, {"a": "x", "b": "y"}) == [("FieldValueInvalid", "spec", "Invalid value: set exactly one of a and b")]
    assert "apply_schema" not in str(FieldError)  # the type is importable from errors; nothing more to it


def test_message_expression_reason_and_field_path() -> None:
    schema = _rule_schema(
        {"rule": "self.n <= 3", "messageExpression": "'n is ' + string(self.n) + ', at most 3'", "reason": "FieldValueForbidden", "fieldPath": ".n"},
        n={"type": "integer"},
    )
    assert _errors(schema, {"n": 5}) == [("FieldValueForbidden", "spec.n", "Forbidden: n is 5, at most 3")]
    without = _rule_schema({"rule": "self.n <= 3"}, n={"type": "integer"})
    assert _errors(without, {"n": 5}) == [("FieldValueInvalid", "spec", "Invalid value: failed rule: self.n <= 3")]


def test_transition_rules_compare_with_the_stored_value_and_are_skipped_on_create() -> None:
    schema = _spec_schema(runtime={"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "runtime is immutable"}]})
    assert _errors(schema, {"runtime": "a"}) == []  # create: no oldSelf, rule skipped
    assert _errors(schema, {"runtime": "a"}, {"runtime": "a"}) == []
    assert _errors(schema, {"runtime": "b"}, {"runtime": "a"}) == [("FieldValueInvalid", "spec.runtime", 'Invalid value: "b": runtime is immutable')]
    assert _errors(schema, {"runtime": "b"}, {}) == []  # nothing to correlate with: skipped too


def test_transition_rules_correlate_map_list_items_by_key() -> None:
    item = {"type": "object", "properties": {"type": {"type": "string"}, "v": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may only grow"}]}}}
    schema = _spec_schema(items={"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"], "items": item})
    old = {"items": [{"type": "A", "v": 2}, {"type": "B", "v": 2}]}
    assert _errors(schema, {"items": [{"type": "B", "v": 3}, {"type": "A", "v": 2}, {"type": "C", "v": 0}]}, old) == []
    assert [f for _, f, _ in _errors(schema, {"items": [{"type": "B", "v": 1}]}, old)] == ["spec.items[0].v"]


NOT_CHECKED = ("FieldValueInvalid", "<nil>", "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")


@pytest.mark.parametrize(
    ("prop", "value", "reason"),
    [
        ({"type": "integer"}, "one", "FieldValueTypeInvalid"),
        ({"type": "string", "enum": ["a"]}, "b", "FieldValueNotSupported"),
        ({"type": "string", "maxLength": 1}, "bb", "FieldValueTooLong"),
        ({"type": "array", "maxItems": 1, "items": {"type": "integer"}}, [1, 2], "FieldValueTooMany"),
    ],
)
def test_rules_are_skipped_after_a_blocking_error_and_the_server_says_so(prop: dict[str, Any], value: Any, reason: str) -> None:
    """kube-apiserver's ``hasBlockingErr``: a wrong type, an unsupported value, a missing required
    field or a size beyond a bound stops every CEL rule, and one more cause says so."""
    schema = _rule_schema({"rule": "false", "message": "never"}, n=prop)
    assert [r for r, _, _ in _errors(schema, {"n": value})] == [reason, "FieldValueInvalid"]
    assert _errors(schema, {"n": value})[-1] == NOT_CHECKED
    required = _rule_schema({"rule": "false", "message": "never"}, n={"type": "integer"})
    required["properties"]["spec"]["required"] = ["n"]
    assert _errors(required, {}) == [("FieldValueRequired", "spec.n", "Required value"), NOT_CHECKED]
    below_minimum = _rule_schema({"rule": "false", "message": "never"}, n={"type": "integer", "minimum": 1})
    assert [r for r, _, _ in _errors(below_minimum, {"n": 0})] == ["FieldValueInvalid", "FieldValueInvalid"]  # not blocking: the rule ran
    assert _errors(_spec_schema(n={"type": "integer"}), {"n": "one"})[-1][0] == "FieldValueTypeInvalid"  # no rule, no note


def test_a_rule_that_cannot_be_evaluated_fails_with_the_cause_and_the_rules_message() -> None:
    """As kube-apiserver words it: the cause, then the rule's message, or its text when it has none."""
    schema = _rule_schema({"rule": "self.missing == 1"}, n={"type": "integer"})
    ((reason, where, detail),) = _errors(schema, {"n": 1})
    assert (reason, where) == ("FieldValueInvalid", "spec")
    assert detail == 'Invalid value: "object": no such key: missing evaluating rule: self.missing == 1'
    with_message = _rule_schema({"rule": "self.missing == 1", "message": " missing must be 1 "}, n={"type": "integer"})
    ((_, _, detail),) = _errors(with_message, {"n": 1})
    assert detail == 'Invalid value: "object": no such key: missing evaluating rule: missing must be 1'


def test_every_rule_of_the_shipped_crds_compiles() -> None:
    # KRUNTIMES_RESOURCES skips the check at import (cheap imports); the full path must accept them
    for crd in kruntimes_crds():
        assert definitions_from_crd(crd) == definitions_from_crd(crd, check_rules=False)
    for rd in KRUNTIMES_RESOURCES:
        assert rd.schema is not None and compile_schema_rules(rd.schema) == []


def test_a_crd_whose_rule_does_not_compile_is_refused() -> None:
    crd = json.loads(json.dumps(kruntimes_crds()[0]))
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"].append({"rule": "self.(("})
    with pytest.raises(Exception) as refused:
        definitions_from_crd(crd)
    assert "compilation failed" in str(refused.value)


# -- the Kubernetes CEL extension functions registered for our rules ---------------------------------------


def test_exactly_the_extension_functions_our_crds_call_are_registered() -> None:
    rules: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            rules.extend(str(r["rule"]) for r in node.get("x-kubernetes-validations") or ())
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for crd in kruntimes_crds():
        collect(crd)
    used = {name for name in EXTENSIONS if any(f".{name}(" in rule for rule in rules)}
    assert used == set(EXTENSIONS) == {"split"}


@pytest.mark.parametrize(
    ("text", "separator", "limit", "expected"),
    [
        ("a/b/c", "/", None, ["a", "b", "c"]),
        ("", "/", None, [""]),
        ("abc", "", None, ["a", "b", "c"]),
        ("a/b/c", "/", 2, ["a", "b/c"]),
        ("a/b/c", "/", 0, []),
        ("a/b/c", "/", -1, ["a", "b", "c"]),
        ("abc", "", 2, ["a", "bc"]),
    ],
)
def test_split_follows_kubernetes_strings_extension(text: str, separator: str, limit: int | None, expected: list[str]) -> None:
    n = None if limit is None else celtypes.IntType(limit)
    assert list(split(celtypes.StringType(text), celtypes.StringType(separator), n)) == expected


def test_split_is_callable_as_a_method_in_rules() -> None:
    rule = compile_rule({"rule": "!self.path.split('/').exists(p, p == '..')", "message": "no .."})
    assert rule.evaluate({"path": "a/b"}, None, False) == rule.evaluate({"path": "a/b"}, None, False)
    ok, bad = rule.evaluate({"path": "a/b"}, None, False), rule.evaluate({"path": "a/../b"}, None, False)
    assert ok is not None and ok.ok
    assert bad is not None and (bad.ok, bad.message) == (False, "no ..")
    limited = compile_rule({"rule": "self.path.split('/', 2) == ['a', 'b/c']"}).evaluate({"path": "a/b/c"}, None, False)
    assert limited is not None and limited.ok


# -- through HTTP, with the CRDs the dev cluster serves by default ------------------------------------------


def _run(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Run", "metadata": {"name": name}, "spec": {"runtime": "python", "mode": {"task": {}}, **spec}}


def test_the_kruntimes_kinds_are_served_with_the_projects_crd_schemas() -> None:
    by_kind = {crd["spec"]["names"]["kind"]: crd for crd in kruntimes_crds()}
    for rd in KRUNTIMES_RESOURCES:
        assert rd.schema == by_kind[rd.kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_crd_defaults_reach_a_reader(kube: Kube) -> None:
    kube.create_run("r", workspace={"name": "w"})
    assert kube.run("r")["spec"]["workspace"] == {"name": "w", "apiGroup": "kruntimes.io/v1alpha1", "kind": "PersistentWorkspace"}
    assert "workspace" not in kube.create_run("bare")["spec"]  # nothing creates the parent


def test_unknown_fields_are_pruned_warned_about_or_refused_as_asked(cluster: DevCluster) -> None:
    http = urllib3.PoolManager(retries=False)
    code, body, resp = request_json(http, "POST", cluster.url + RUNS, _run("a", runtimeName="x"))
    assert code == 201 and "runtimeName" not in body["spec"]
    assert 'unknown field \\"spec.runtimeName\\"' in resp.headers.get("Warning", "")
    code, body, _ = request_json(http, "POST", cluster.url + RUNS + "?fieldValidation=Strict", _run("b", runtimeName="x"))
    assert code == 400 and body["reason"] == "BadRequest"
    assert body["message"] == 'Run in version "v1alpha1" cannot be handled as a Run: strict decoding error: unknown field "spec.runtimeName"'
    code, _, resp = request_json(http, "POST", cluster.url + RUNS + "?fieldValidation=Ignore", _run("c", runtimeName="x"))
    assert code == 201 and "Warning" not in resp.headers


def test_an_invalid_create_is_a_422_with_causes_and_the_servers_message(cluster: DevCluster) -> None:
    http = urllib3.PoolManager(retries=False)
    code, body, _ = request_json(http, "POST", cluster.url + RUNS, _run("bad", runtime="no_", mode={"task": {}, "function": {}}))
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('Run.kruntimes.io "bad" is invalid: [spec.runtime: Invalid value: "no_": spec.runtime in body should match')
    assert [(c["reason"], c["field"]) for c in body["details"]["causes"]] == [("FieldValueInvalid", "spec.runtime"), ("FieldValueInvalid", "spec.mode")]
    assert body["details"]["causes"][1]["message"] == "Invalid value: exactly one of task or function must be set"


def test_updates_patches_and_status_writes_are_validated_after_the_change(cluster: DevCluster) -> None:
    http = urllib3.PoolManager(retries=False)
    one = cluster.url + RUNS + "/r"
    assert request_json(http, "POST", cluster.url + RUNS, _run("r", cancelRequested=True))[0] == 201
    code, body, _ = request_json(http, "PATCH", one, {"spec": {"timeout": "5m"}}, content_type="application/merge-patch+json")
    assert code == 422 and "resources are immutable after Run creation" in body["message"]
    code, body, _ = request_json(http, "PATCH", one, {"spec": {"cancelRequested": False}}, content_type="application/merge-patch+json")
    assert code == 422 and "cancelRequested may not transition from true to false" in body["message"]
    code, body, _ = request_json(http, "PATCH", one, [{"op": "replace", "path": "/spec/runtime", "value": "Bad Name"}], content_type="application/json-patch+json")
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec.runtime"
    current = request_json(http, "GET", one)[1]
    code, body, _ = request_json(http, "PUT", one, {**current, "spec": {**current["spec"], "workspace": {"name": "w"}}})
    assert code == 422 and "workspace and affinity are immutable after Run creation" in body["message"]
    status = one + "/status"
    code, body, _ = request_json(http, "PATCH", status, {"status": {"phase": "Sleeping"}}, content_type="application/merge-patch+json")
    assert code == 422 and body["details"]["causes"][0]["reason"] == "FieldValueNotSupported"
    condition = {"type": "Scheduled", "status": "True", "reason": "Bound", "message": "", "lastTransitionTime": "not a time"}
    code, body, _ = request_json(http, "PATCH", status, {"status": {"conditions": [condition]}}, content_type="application/merge-patch+json")
    assert code == 422 and body["details"]["causes"][0]["field"] == "status.conditions[0].lastTransitionTime"
    code, body, _ = request_json(http, "PATCH", status, {"status": {"assignedPod": "p"}}, content_type="application/merge-patch+json")
    assert code == 200 and body["status"] == {"assignedPod": "p", "phase": "Pending"}  # status.phase defaulted
    assert request_json(http, "GET", one)[1]["spec"] == current["spec"]


def test_dry_run_validates_exactly_the_same_and_persists_nothing(cluster: DevCluster) -> None:
    http = urllib3.PoolManager(retries=False)
    code, body, _ = request_json(http, "POST", cluster.url + RUNS + "?dryRun=All", _run("bad", mode={}))
    assert code == 422 and "exactly one of task or function must be set" in body["message"]
    code, body, _ = request_json(http, "POST", cluster.url + RUNS + "?dryRun=All", _run("good", workspace={"name": "w"}))
    assert code == 201 and body["spec"]["workspace"]["kind"] == "PersistentWorkspace"
    assert request_json(http, "GET", cluster.url + RUNS + "/good")[0] == 404
    assert request_json(http, "POST", cluster.url + RUNS, _run("r"))[0] == 201
    code, _, _ = request_json(http, "PATCH", cluster.url + RUNS + "/r?dryRun=All", {"spec": {"runtime": "node"}}, content_type="application/merge-patch+json")
    assert code == 422


@pytest.mark.parametrize("depth", [MAX_BODY_DEPTH + 1, 900, 100_000])
@pytest.mark.parametrize("content_type", ["application/json", "application/yaml"])
def test_a_body_nested_too_deep_is_a_small_400(cluster: DevCluster, depth: int, content_type: str) -> None:
    if content_type == "application/json":
        body = '{"apiVersion":"kruntimes.io/v1alpha1","kind":"Run","metadata":{"name":"d"},"spec":{"x":' + "[" * depth + "]" * depth + "}}"
    else:
        body = "apiVersion: kruntimes.io/v1alpha1\nkind: Run\nmetadata: {name: d}\nspec:\n  x: " + "[" * depth + "]" * depth + "\n"
    http = urllib3.PoolManager(retries=False)
    for method, url in (("POST", cluster.url + RUNS), ("PUT", cluster.url + RUNS + "/d")):
        code, status, resp = request_json(http, method, url, body, content_type=content_type)
        assert code == 400 and status["reason"] == "BadRequest" and "nested too deeply" in status["message"]
        assert len(resp.data) < 1000 and "Traceback" not in resp.data.decode()
    code, status, resp = request_json(http, "PATCH", cluster.url + RUNS + "/d", body if content_type == "application/json" else "{}", content_type="application/merge-patch+json")
    assert code in (400, 404) and len(resp.data) < 1000


def test_a_body_just_within_the_depth_limit_is_decoded(cluster: DevCluster) -> None:
    http = urllib3.PoolManager(retries=False)
    nested: Any = {}
    for _ in range(MAX_BODY_DEPTH - 3):  # the Run object, spec and env's list count too
        nested = {"a": nested}
    code, body, _ = request_json(http, "POST", cluster.url + RUNS, _run("ok", source={"inline": "x"}, affinity={}, resources={"requests": {}}, x=nested))
    assert code == 201, body
