"""Wire facts of SPEC §1–§3: workspace references, label syntax in affinity, Go durations, whole names."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

import pytest

from kruntimes.pure.model.objects import SchedulerConfig, WorkspaceRef
from kruntimes.pure.model.plan import Fail, Wait
from kruntimes.pure.model.times import parse_duration
from kruntimes.pure.planner import retry_backoff
from kruntimes.pure.readers.kube import decode_run
from kruntimes.pure.readers.scenario import decode_scenario
from tests.builders import NOW, affinity_json, at, decoded_pod, decoded_run, expression, run_json, term
from tests.pure.planning_world import plan, slot, snapshot

# --- spec.workspace.apiGroup and kind --------------------------------------------------------


def _run_with_workspace(ref: dict[str, object]) -> dict[str, object]:
    body = run_json("r")
    cast(dict[str, object], body["spec"])["workspace"] = ref
    return body


@pytest.mark.parametrize(
    "ref",
    [
        {"name": "ws"},
        {"name": "ws", "apiGroup": "kruntimes.io/v1alpha1", "kind": "PersistentWorkspace"},
        {"name": "ws", "apiGroup": "kruntimes.io"},
        {"name": "ws", "kind": "PersistentWorkspace"},
    ],
)
def test_the_crd_default_api_group_and_the_bare_group_name_the_same_workspace(ref: dict[str, object]) -> None:
    run = decode_run(_run_with_workspace(ref)).unwrap()
    assert run.spec_error is None
    assert run.workspace == WorkspaceRef("ws")


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ({"name": "ws", "apiGroup": "kruntimes.io/v1"}, "spec.workspace.apiGroup must be kruntimes.io/v1alpha1 (or kruntimes.io)"),
        ({"name": "ws", "apiGroup": "storage.k8s.io"}, "spec.workspace.apiGroup must be kruntimes.io/v1alpha1 (or kruntimes.io)"),
        ({"name": "ws", "apiGroup": 1}, "spec.workspace.apiGroup must be kruntimes.io/v1alpha1 (or kruntimes.io)"),
        ({"name": "ws", "kind": "Volume"}, "spec.workspace.kind must be PersistentWorkspace"),
    ],
)
def test_any_other_workspace_api_group_or_kind_fails_the_run_as_invalid_spec(ref: dict[str, object], message: str) -> None:
    run = decode_run(_run_with_workspace(ref)).unwrap()
    assert plan(snapshot(run, (slot("p1"),))) == Fail("InvalidSpec", message)


# --- label syntax in affinity terms -----------------------------------------------------------

PLACES = ["required", "preferred", "anti_required", "anti_preferred"]


def _affinity_in(place: str, bad_term: dict[str, object]) -> dict[str, object]:
    if place == "required":
        return affinity_json(required=[bad_term])
    if place == "preferred":
        return affinity_json(preferred=[(10, bad_term)])
    if place == "anti_required":
        return affinity_json(anti_required=[bad_term])
    return affinity_json(anti_preferred=[(10, bad_term)])


def _failure(place: str, bad_term: dict[str, object]) -> Fail:
    run = decoded_run("r", affinity=_affinity_in(place, bad_term))
    result = plan(snapshot(run, (slot("p1"),)))
    assert isinstance(result, Fail), result
    assert result.reason == "InvalidAffinity"
    return result


LONG_VALUE = "v" * 64
BAD_LABELS = [
    ("key with a space and !", term({"bad key!": "x"}), '"bad key!"'),
    ("uppercase prefix", term({"Example.com/app": "x"}), '"Example.com/app"'),
    ("empty prefix", term({"/app": "x"}), '"/app"'),
    ("64-character name", term({"a" * 64: "x"}), '"' + "a" * 64 + '"'),
    ("value with a space", term({"tier": "has space"}), '"tier"'),
    ("64-character value", term({"tier": LONG_VALUE}), '"tier"'),
    ("expression key", term(expressions=[expression("bad key!", "Exists")]), '"bad key!"'),
    ("expression value", term(expressions=[expression("tier", "In", ["gold", "has space"])]), '"tier"'),
    ("expression 64-character value", term(expressions=[expression("tier", "NotIn", [LONG_VALUE])]), '"tier"'),
]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize(("form", "bad_term", "shown"), BAD_LABELS, ids=[form for form, _, _ in BAD_LABELS])
def test_a_label_key_or_value_of_invalid_syntax_fails_the_run_naming_the_path_and_key_only(
    place: str, form: str, bad_term: dict[str, object], shown: str
) -> None:
    failure = _failure(place, bad_term)
    assert failure.message.startswith("invalid run affinity: run"), form
    assert ".labelSelector.match" in failure.message
    assert shown in failure.message
    for secret in ("has space", LONG_VALUE, "gold"):
        assert secret not in failure.message


def test_label_errors_name_the_exact_field() -> None:
    expressions = term(expressions=[expression("tier", "In", ["gold", "has space"])])
    assert _failure("preferred", expressions).message.startswith(
        "invalid run affinity: runAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].runAffinityTerm"
        '.labelSelector.matchExpressions[0].values[1] of key "tier" is not a valid label value'
    )
    assert _failure("anti_required", term({"bad key!": "x"})).message.startswith(
        "invalid run affinity: runAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        '.labelSelector.matchLabels key "bad key!" is not a valid label key'
    )


def test_a_hostile_long_key_is_told_by_its_length() -> None:
    failure = _failure("required", term({"k" * 5000: "x"}))
    assert "of 5000 characters is not a valid label key" in failure.message
    assert len(failure.message) < 400


@pytest.mark.parametrize(
    "labels",
    [
        {"app": ""},
        {"example.com/app": "a.b-c_d"},
        {"a" * 63: "b" * 63},
        {"x" * 253 + "/" + "y" * 63: "z"},
        {"kruntimes.io/tier": "Gold"},
    ],
)
def test_valid_label_keys_and_values_are_accepted(labels: dict[str, str]) -> None:
    run = decoded_run("r", affinity=affinity_json(required=[term(labels)]))
    assert run.affinity_error is None
    assert run.affinity.required[0].selector.matches(labels)


def test_a_prefix_longer_than_253_characters_is_invalid() -> None:
    run = decoded_run("r", affinity=affinity_json(required=[term({"x" * 254 + "/app": "v"})]))
    assert run.affinity_error is not None and "not a valid label key" in run.affinity_error


def test_a_valid_key_with_a_prefix_is_not_a_valid_value_even_once_seen_as_a_key() -> None:
    decoded_run("r", affinity=affinity_json(required=[term({"example.com/app": "v"})]))
    run = decoded_run("r", affinity=affinity_json(required=[term({"app": "example.com/app"})]))
    assert run.affinity_error is not None and "not a valid label value" in run.affinity_error


# --- Go durations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1ns", timedelta(microseconds=1)),
        ("999ns", timedelta(microseconds=1)),
        ("1001ns", timedelta(microseconds=2)),
        ("-1ns", timedelta(microseconds=-1)),
        ("0.1us", timedelta(microseconds=1)),
        ("1µs", timedelta(microseconds=1)),
        ("1μs", timedelta(microseconds=1)),
        ("+5s", timedelta(seconds=5)),
        ("-0", timedelta(0)),
        ("1.s", timedelta(seconds=1)),
        (".5s", timedelta(milliseconds=500)),
        ("1h1h", timedelta(hours=2)),
        ("1000000h", timedelta(hours=1_000_000)),
        ("2562047h", timedelta(hours=2_562_047)),
        ("9223372036854775807ns", timedelta(microseconds=9_223_372_036_854_776)),
        ("-9223372036854775808ns", timedelta(microseconds=-9_223_372_036_854_776)),
        ("1.0000000000000000000000001s", timedelta(seconds=1)),
        ("1.25s", timedelta(milliseconds=1250)),
        ("2.75h", timedelta(minutes=165)),
        ("1m.5s", timedelta(seconds=60.5)),  # a unit ends where a point or a digit starts
        # fraction digits past int64 precision are dropped, not an error (Go's leadingFraction)
        ("0.99999999999999999999s", timedelta(seconds=1)),
        ("0.9223372036854775809s", timedelta(microseconds=922338)),
        # Go keeps 19 fraction digits here and then rounds in float64: 3218105812671 ns, and
        # with 330 ns more one nanosecond past a whole microsecond
        ("0.8939182812974999146h330ns", timedelta(microseconds=3218105814)),
    ],
)
def test_durations_read_as_go_reads_them_and_never_round_to_zero(text: str, value: timedelta) -> None:
    assert parse_duration(text) == value


@pytest.mark.parametrize(
    "text",
    ["2562048h", "9223372036854775808ns", "-9223372036854775809ns", "99999999999999999999s", "1sec", ".s", "-", "1", "1.5", "X1s"],
)
def test_durations_go_refuses_are_refused(text: str) -> None:
    assert parse_duration(text) is None


def _retried(backoff: str, attempt: int) -> timedelta:
    conditions: list[dict[str, object]] = [{"type": "Running", "status": "False", "reason": "Retry", "lastTransitionTime": at(-1)}]
    return retry_backoff(decoded_run("r", backoff=backoff, attempt=attempt, conditions=conditions))


def test_a_one_nanosecond_backoff_is_one_microsecond_not_the_default() -> None:
    assert _retried("1ns", 2) == timedelta(microseconds=1)


@pytest.mark.parametrize("backoff", ["1000000h", "2562047h", "900000h"])
@pytest.mark.parametrize("attempt", [2, 3, 64, 10_000])
def test_a_huge_backoff_is_capped_at_sixty_seconds(backoff: str, attempt: int) -> None:
    run = decoded_run("r", backoff=backoff, attempt=attempt)
    assert run.retry_backoff is not None and run.retry_backoff > timedelta(days=365 * 100)
    assert retry_backoff(run) == timedelta(seconds=60)


def test_a_one_nanosecond_heartbeat_window_makes_a_second_old_heartbeat_stale() -> None:
    stale = parse_duration("1ns")
    assert stale is not None
    config = SchedulerConfig(heartbeat_stale_after=stale)
    pod = decoded_pod("p1", heartbeat_at=at(-1))
    assert not pod.heartbeat_fresh(NOW, config.stale_after())


def test_a_scenario_accepts_a_heartbeat_window_beyond_a_century() -> None:
    scenario = decode_scenario([{"config": {"heartbeatStaleAfter": "1000000h"}}], "s.yaml", NOW).unwrap()
    assert scenario.config.stale_after() == timedelta(hours=1_000_000)


# --- names are written whole -------------------------------------------------------------------------


WORKSPACE_94 = "w" * 30 + "." + "x" * 63  # a valid DNS subdomain of 94 characters
RUNTIME_100 = "r" * 100


def test_a_long_workspace_name_appears_whole_in_the_pending_message() -> None:
    run = decoded_run("r", workspace=WORKSPACE_94)
    result = plan(snapshot(run, (slot("p1"),)))
    assert isinstance(result, Wait), result
    assert result.message == f'waiting for workspace "{WORKSPACE_94}" placement for runtime "python"'


def test_a_long_runtime_name_appears_whole_in_the_pending_message() -> None:
    run = decoded_run("r", runtime=RUNTIME_100)
    result = plan(snapshot(run, ()))
    assert isinstance(result, Wait), result
    assert result.message == f'waiting for available runtime pods for runtime "{RUNTIME_100}"'


def test_a_long_bad_request_name_appears_whole() -> None:
    name = "example.com/" + "g" * 63
    run = decoded_run("r", requests={name: "lots"})
    assert run.requests_error == f'resource request "{name}" must be a non-negative integer'


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("runtime", "spec.runtime must be at most 253 characters"),
        ("workspace", "spec.workspace.name must be at most 253 characters"),
    ],
)
def test_a_name_longer_than_kubernetes_allows_fails_the_run_as_invalid_spec(field: str, message: str) -> None:
    run = decoded_run("r", **{field: "n" * 254})  # type: ignore[arg-type]
    assert plan(snapshot(run, (slot("p1"),))) == Fail("InvalidSpec", message)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("runtime", "py thon\u2603", "spec.runtime must be made of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"),
        ("runtime", "-python", "spec.runtime must be made of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"),
        ("workspace", "My_Workspace", "spec.workspace.name must be a DNS subdomain (lowercase alphanumerics, '-' and '.', each part between dots starting and ending with an alphanumeric)"),
    ],
)
def test_a_name_no_object_could_have_fails_the_run_without_echoing_it(field: str, value: str, message: str) -> None:
    """No pod's runtime label and no PersistentWorkspace can carry such a name (the CRD's pattern
    refuses it too): the Run fails at once, and the message does not repeat what it was given."""
    run = decoded_run("r", **{field: value})  # type: ignore[arg-type]
    assert plan(snapshot(run, (slot("p1"),))) == Fail("InvalidSpec", message)
    assert value not in message
