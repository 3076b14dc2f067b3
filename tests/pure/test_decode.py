"""Decoding what the API server sends (SPEC §1 wire facts, §2 requests, §3.5 affinity)."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.pipeline import is_successful

from kruntimes.pure.readers.kube import (
    capacity_from_annotations,
    decode_affinity,
    decode_object,
    decode_pod,
    decode_requests,
    decode_run,
    decode_workspace,
)
from kruntimes.pure.model.objects import HEARTBEAT_CONDITION, RunAffinity, SchedulerConfig, frozen_labels, frozen_resources
from kruntimes.pure.model.resources import fits
from tests.builders import (
    NOW,
    affinity_json,
    at,
    decoded_pod,
    decoded_run,
    expression,
    pod_json,
    run_json,
    term,
    workspace_json,
)

STALE = SchedulerConfig().stale_after()

# --- capacity ---------------------------------------------------------------------------


def test_a_pod_without_capacity_annotations_offers_two_runs() -> None:
    assert dict(decoded_pod("a").capacity) == {"runs": 2}


def test_capacity_annotations_set_resources_and_override_runs() -> None:
    pod = decoded_pod("a", capacity={"runs": "5", "cpu": "4", "memory": "8Gi", "tokens": "1.5k"})
    assert dict(pod.capacity) == {"runs": 5, "cpu": 4, "memory": 8 * 1024**3, "tokens": 1500}


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"kruntimes.io/capacity.": "4"}, {"runs": 2}),
        ({"kruntimes.io/capacity.cpu": "lots"}, {"runs": 2}),
        ({"kruntimes.io/capacity.cpu": "0"}, {"runs": 2}),
        ({"kruntimes.io/capacity.cpu": "-3"}, {"runs": 2}),
        ({"kruntimes.io/capacity.runs": "0"}, {"runs": 2}),
        ({"kruntimes.io/capacity.runs": "-1"}, {"runs": 2}),
        ({"kruntimes.io/capacityx.cpu": "4"}, {"runs": 2}),
        ({"example.com/capacity.cpu": "4"}, {"runs": 2}),
    ],
)
def test_malformed_capacity_annotations_are_ignored(annotations: dict[str, str], expected: dict[str, int]) -> None:
    assert dict(capacity_from_annotations(frozen_labels(annotations))) == expected


def test_a_domain_prefixed_resource_cannot_be_advertised() -> None:
    # "kruntimes.io/capacity.example.com/gpu" has two slashes: the API server
    # refuses such a key, and a hand-written file carrying it advertises nothing.
    pod = decoded_pod("a", annotations={"kruntimes.io/capacity.example.com/gpu": "1", "example.com/gpu": "1"})
    assert dict(pod.capacity) == {"runs": 2}
    assert not fits(pod.capacity, {}, {"example.com/gpu": 1, "runs": 1})


def test_fractional_capacity_is_kept_exactly() -> None:
    assert decoded_pod("a", capacity={"cpu": "1500m"}).capacity["cpu"] * 2 == 3


# --- schedulability -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "deleting", "ready", "schedulable"),
    [
        ("Running", False, True, True),
        ("Pending", False, True, False),
        ("Succeeded", False, True, False),
        ("", False, True, False),
        ("Running", True, True, False),
        ("Running", False, False, False),
        ("Running", False, None, False),
    ],
)
def test_only_running_ready_pods_not_being_deleted_are_schedulable(
    phase: str, deleting: bool, ready: bool | None, schedulable: bool
) -> None:
    assert decoded_pod("a", phase=phase, deleting=deleting, ready=ready).schedulable is schedulable


def test_the_first_ready_condition_decides() -> None:
    first_false = pod_json("a", ready=False)
    conditions = cast(list[dict[str, object]], cast(dict[str, object], first_false["status"])["conditions"])
    conditions.append({"type": "Ready", "status": "True"})
    assert not decode_pod(first_false).unwrap().schedulable

    first_true = pod_json("b", ready=True)
    conditions = cast(list[dict[str, object]], cast(dict[str, object], first_true["status"])["conditions"])
    conditions.append({"type": "Ready", "status": "False"})
    assert decode_pod(first_true).unwrap().schedulable


def test_a_pod_without_the_runtime_label_has_no_runtime() -> None:
    assert decoded_pod("a", runtime=None).runtime == ""


# --- heartbeat ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("probe_offset", "fresh"),
    [
        (0, True),
        (-14.999, True),
        (-15, True),
        (-15.000001, False),
        (-60, False),
        (3600, True),
    ],
)
def test_heartbeat_freshness_window_is_inclusive_and_future_probes_are_fresh(probe_offset: float, fresh: bool) -> None:
    pod = decoded_pod("a", heartbeat_at=at(probe_offset))
    assert pod.heartbeat_fresh(NOW, STALE) is fresh
    assert pod.available(NOW, STALE) is fresh


@pytest.mark.parametrize(
    ("status", "probe"),
    [(None, at(0)), ("False", at(0)), ("Unknown", at(0)), ("True", None), ("True", "not-a-time")],
)
def test_missing_false_or_unprobed_heartbeats_are_not_fresh(status: str | None, probe: str | None) -> None:
    pod = decoded_pod("a", heartbeat_status=status, heartbeat_at=probe)
    assert not pod.heartbeat_fresh(NOW, STALE)
    assert not pod.available(NOW, STALE)


def test_the_first_heartbeat_condition_decides() -> None:
    body = pod_json("a", heartbeat_status="False")
    conditions = cast(list[dict[str, object]], cast(dict[str, object], body["status"])["conditions"])
    conditions.append({"type": HEARTBEAT_CONDITION, "status": "True", "lastProbeTime": at(0)})
    assert not decode_pod(body).unwrap().heartbeat_fresh(NOW, STALE)


@pytest.mark.parametrize("configured", [timedelta(0), timedelta(seconds=-5)])
def test_a_non_positive_stale_after_means_fifteen_seconds(configured: timedelta) -> None:
    config = SchedulerConfig(heartbeat_stale_after=configured)
    assert config.stale_after() == timedelta(seconds=15)
    assert decoded_pod("a", heartbeat_at=at(-15)).heartbeat_fresh(NOW, config.stale_after())
    assert not decoded_pod("a", heartbeat_at=at(-16)).heartbeat_fresh(NOW, config.stale_after())


def test_a_configured_stale_after_is_used() -> None:
    config = SchedulerConfig(heartbeat_stale_after=timedelta(seconds=60))
    assert decoded_pod("a", heartbeat_at=at(-59)).heartbeat_fresh(NOW, config.stale_after())


# --- requests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "usable"),
    [
        (None, {"runs": 1}),
        ({}, {"runs": 1}),
        ({"cpu": "3"}, {"cpu": 3, "runs": 1}),
        ({"tokens": "1.5k"}, {"tokens": 1500, "runs": 1}),
        ({"runs": "0", "cpu": "0"}, {"runs": 1}),
        ({"runs": "2"}, {"runs": 2}),
        ({"cpu": 4}, {"cpu": 4, "runs": 1}),
    ],
)
def test_valid_requests_drop_zeros_and_default_runs_to_one(
    requests: dict[str, object] | None, usable: dict[str, int]
) -> None:
    decoded, error = decode_requests(requests)
    assert error is None
    assert dict(decoded) == usable


@pytest.mark.parametrize("bad", ["500m", "-1", "abc", "1.5", ""])
def test_a_request_that_is_not_a_non_negative_integer_is_invalid(bad: str) -> None:
    run = decoded_run("r", requests={"cpu": bad})
    assert run.requests_error == 'resource request "cpu" must be a non-negative integer'


def test_the_lexicographically_first_bad_request_is_reported() -> None:
    run = decoded_run("r", requests={"zeta": "x", "memory": "1", "beta": "-1", "gamma": "500m"})
    assert run.requests_error == 'resource request "beta" must be a non-negative integer'


def test_an_invalid_run_still_carries_its_valid_requests_for_usage_accounting() -> None:
    run = decoded_run("r", requests={"cpu": "2", "memory": "500m"}, phase="Running", assigned_pod="a")
    assert run.requests_error is not None
    assert dict(run.requests) == {"cpu": 2, "runs": 1}


# --- affinity ---------------------------------------------------------------------------------

SECRET_KEY = "team-secret-key"
SECRET_VALUE = "secret-value-7"


def _invalid_terms() -> list[tuple[str, dict[str, object]]]:
    good_selector = {"matchLabels": {SECRET_KEY: SECRET_VALUE}}
    return [
        ("other topology key", {"labelSelector": good_selector, "topologyKey": SECRET_KEY}),
        ("missing topology key", {"labelSelector": good_selector}),
        ("missing selector", {"topologyKey": "kruntimes.io/runtime-pod"}),
        ("empty selector", term()),
        ("empty matchLabels and expressions", term({}, [])),
        ("unknown operator", term(expressions=[expression(SECRET_KEY, "Bogus", [SECRET_VALUE])])),
        ("In without values", term(expressions=[expression(SECRET_KEY, "In")])),
        ("NotIn with empty values", term(expressions=[expression(SECRET_KEY, "NotIn", [])])),
        ("Exists with values", term(expressions=[expression(SECRET_KEY, "Exists", [SECRET_VALUE])])),
        ("DoesNotExist with values", term(expressions=[expression(SECRET_KEY, "DoesNotExist", [SECRET_VALUE])])),
        ("empty key", term(expressions=[expression("", "Exists")])),
        ("non-string values", term(expressions=[{"key": SECRET_KEY, "operator": "In", "values": [7]}])),
        ("expression not an object", term(expressions=[cast(dict[str, object], SECRET_VALUE)])),
        ("matchLabels value not a string", term(cast(dict[str, str], {SECRET_KEY: 3}))),
        ("selector not an object", {"labelSelector": SECRET_VALUE, "topologyKey": "kruntimes.io/runtime-pod"}),
    ]


INVALID_TERMS = _invalid_terms()
PLACES = ["required", "preferred", "anti_required", "anti_preferred"]


def _affinity_with(place: str, bad: dict[str, object]) -> dict[str, object]:
    if place == "required":
        return affinity_json(required=[bad])
    if place == "preferred":
        return affinity_json(preferred=[(10, bad)])
    if place == "anti_required":
        return affinity_json(anti_required=[bad])
    return affinity_json(anti_preferred=[(10, bad)])


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize(("form", "bad"), INVALID_TERMS, ids=[form for form, _ in INVALID_TERMS])
def test_every_invalid_term_form_fails_in_every_list_without_echoing_selector_text(
    place: str, form: str, bad: dict[str, object]
) -> None:
    run = decoded_run("secret-run-name", labels={SECRET_KEY: SECRET_VALUE}, affinity=_affinity_with(place, bad))
    assert run.affinity_error is not None, form
    assert run.affinity == RunAffinity()
    for secret in (SECRET_KEY, SECRET_VALUE, "secret-run-name", "Bogus"):
        assert secret not in run.affinity_error


@pytest.mark.parametrize("weight", [0, 101, -1, "5", 1.5, True, None])
def test_preferred_weights_must_be_integers_from_1_to_100(weight: object) -> None:
    affinity = {
        "runAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": weight, "runAffinityTerm": term({"a": "b"})}]
        }
    }
    assert not is_successful(decode_affinity(affinity))


def test_a_valid_affinity_compiles_match_labels_and_expressions() -> None:
    affinity = affinity_json(
        required=[term({"zone": "blue"}, [expression("tier", "In", ["gold", "silver"])])],
        preferred=[(7, term(expressions=[expression("debug", "DoesNotExist")]))],
        anti_required=[term(expressions=[expression("noisy", "Exists")])],
        anti_preferred=[(3, term(expressions=[expression("zone", "NotIn", ["red"])]))],
    )
    compiled = decode_affinity(affinity).unwrap()
    assert len(compiled.required) == len(compiled.anti_required) == 1
    assert compiled.preferred[0].weight == 7 and compiled.anti_preferred[0].weight == 3
    selector = compiled.required[0].selector
    assert selector.matches(frozen_labels({"zone": "blue", "tier": "gold"}))
    assert not selector.matches(frozen_labels({"zone": "blue", "tier": "bronze"}))
    assert not selector.matches(frozen_labels({"tier": "gold"}))


def test_too_many_terms_are_refused() -> None:
    affinity = affinity_json(required=[term({"a": "b"})] * 33)
    assert not is_successful(decode_affinity(affinity))


# --- objects ---------------------------------------------------------------------------------


def test_decode_object_dispatches_on_api_version_and_kind() -> None:
    assert decode_object(pod_json("p")).unwrap() == decoded_pod("p")
    assert decode_object(run_json("r")).unwrap() == decoded_run("r")
    assert is_successful(decode_object(workspace_json("w")))
    assert not is_successful(decode_object({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}))


@pytest.mark.parametrize("field", ["name", "uid"])
def test_objects_without_name_or_uid_do_not_decode(field: str) -> None:
    body = run_json("r")
    del cast(dict[str, object], body["metadata"])[field]
    assert not is_successful(decode_run(body))


def test_a_missing_namespace_means_default() -> None:
    body = run_json("r")
    del cast(dict[str, object], body["metadata"])["namespace"]
    assert decode_run(body).unwrap().namespace == "default"


# --- totality ------------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)

_INTERESTING_KEYS = [
    "metadata", "spec", "status", "name", "namespace", "uid", "labels", "annotations", "conditions",
    "runtime", "resources", "requests", "affinity", "runAffinity", "runAntiAffinity", "workspace",
    "requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution",
    "labelSelector", "matchLabels", "matchExpressions", "values", "operator", "weight", "runAffinityTerm",
    "phase", "assignedPod", "attempt", "lastProbeTime", "retryPolicy", "backoff", "cancelRequested",
    "creationTimestamp", "deletionTimestamp", "topologyKey", "boundPod", "mode",
]  # fmt: skip


@given(JSON)
def test_decoding_arbitrary_json_never_raises(value: object) -> None:
    for decode in (decode_object, decode_pod, decode_run, decode_workspace):
        decode(value)
    decode_requests(value)
    decode_affinity(value)


def _paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found: list[tuple[object, ...]] = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(_paths(child, (*prefix, index)))
    return found


def _valid_objects() -> list[dict[str, object]]:
    return [
        pod_json("p", capacity={"cpu": "4"}, labels={"x": "y"}),
        run_json(
            "r",
            labels={"zone": "blue"},
            requests={"cpu": "2"},
            affinity=affinity_json(
                required=[term({"zone": "blue"}, [expression("tier", "In", ["gold"])])],
                preferred=[(5, term({"a": "b"}))],
            ),
            workspace="ws",
            phase="Pending",
            attempt=2,
            conditions=[{"type": "Running", "status": "False", "lastTransitionTime": at(-1)}],
            backoff="2s",
        ),
        workspace_json("ws", bound_pod="p"),
    ]


@given(st.data())
def test_decoding_mutated_valid_objects_never_raises(data: st.DataObject) -> None:
    body = copy.deepcopy(data.draw(st.sampled_from(_valid_objects())))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        path = data.draw(st.sampled_from(_paths(body)))
        if not path:
            continue
        parent: object = body
        for step in path[:-1]:
            parent = parent[step]  # type: ignore[index]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(_INTERESTING_KEYS))] = data.draw(JSON)
        else:
            parent[path[-1]] = data.draw(JSON)  # type: ignore[index]
    decode_object(body)
    decode_pod(body)
    decode_run(body)
    decode_workspace(body)


# --- sharing equal values across Runs ------------------------------------------------------


def test_equal_labels_settled_statuses_and_creation_times_are_shared_between_runs() -> None:
    first = decoded_run("a", labels={"team": "t1", "app": "x"}, phase="Running", assigned_pod="p")
    second = decoded_run("b", labels={"app": "x", "team": "t1"}, phase="Running", assigned_pod="p")
    assert first.labels is second.labels
    assert list(first.labels) == ["app", "team"], "sorted by key, as frozen_labels"
    assert first.status is second.status
    assert first.creation_timestamp is second.creation_timestamp
    other = decoded_run("c", labels={"app": "y"}, phase="Running", assigned_pod="q")
    assert other.labels == {"app": "y"} and other.status.assigned_pod == "q"


def test_a_status_with_conditions_or_a_message_is_not_shared() -> None:
    raw = run_json("a", phase="Pending", message="waiting")
    first, second = decode_run(raw).unwrap(), decode_run(copy.deepcopy(raw)).unwrap()
    assert first.status == second.status and first.status is not second.status


def test_a_sharing_table_is_bounded() -> None:
    from kruntimes.pure.readers.kube import _Shared

    table: _Shared[str, str] = _Shared(3)
    for key in "abcdef":
        assert table.put(key, key.upper()) == key.upper()
    assert table.get("f") == "F"
    assert sum(table.get(k) is not None for k in "abcdef") <= 3


def test_equal_request_maps_decode_once_and_other_types_are_never_confused() -> None:
    first = decode_requests({"runs": "2", "gpu": "1"})
    again = decode_requests({"runs": "2", "gpu": "1"})
    assert first == (frozen_resources({"runs": 2, "gpu": 1}), None)
    assert again[0] is first[0], "the second decode shares the first one's map"
    assert decode_requests({"runs": 2, "gpu": 1}) == first  # numbers are quantities too, decoded afresh
    assert decode_requests({"runs": True})[1] == 'resource request "runs" must be a non-negative integer'
    assert decode_requests({"runs": "1"}) == (frozen_resources({"runs": 1}), None)
    assert decode_requests({"runs": "500m"})[1] == 'resource request "runs" must be a non-negative integer'
    # the second decode comes from the memo and says the same
    assert decode_requests({"runs": "500m"})[1] == 'resource request "runs" must be a non-negative integer'
