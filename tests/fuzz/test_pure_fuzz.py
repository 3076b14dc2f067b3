"""Hostile JSON through the whole pure pipeline: the JSON text an API server would send → ``loads`` →
decode → cluster.apply → snapshot.take → plan_cycle → status.status_for → status.patch_body, and the whole
step (``simulate``: transact, write, settle) with its cycle record read back as ``replay`` reads it.
Nothing raises; invalid Runs end ``Fail`` with a reason from the closed set and a bounded message that
echoes no selector text, label value or name.

``--hypothesis-show-statistics`` reports, per test, how many examples held each class of hostile value
(``hostile: …``, strategies.HOSTILE) and how each object ended (``Run: …``, ``refused: …``)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from hypothesis import event, given, target
from hypothesis import strategies as st
from returns.pipeline import is_successful

from kruntimes.pure.model import messages
from kruntimes.pure.state.cluster import EMPTY_STATE, Event, apply, from_objects
from kruntimes.pure.readers.cyclelog import decode_record, encode_record
from kruntimes.pure.readers.json import loads
from kruntimes.pure.readers.kube import capacity_from_annotations, decode_object, decode_pod, decode_run, decode_workspace
from kruntimes.pure.readers.scenario import Scenario
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.ledger import EMPTY_LEDGER
from kruntimes.pure.model.objects import DEFAULT_CONFIG, HEARTBEAT_CONDITION, Run, RunKey, RuntimePod, Workspace, frozen_labels
from kruntimes.pure.model.times import parse_time
from kruntimes.pure.model.plan import Bind, Cancel, Delay, Fail, Plan, Skip, Wait
from kruntimes.pure.simulation import simulate
from kruntimes.pure.snapshot import take
from kruntimes.pure.status import patch_body, status_for

from .strategies import MARK, deep, healthy_pods, json_values, plain_runs, pods, runs, to_json, workspaces

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
FAIL_REASONS = frozenset({messages.REASON_INVALID_RESOURCES, messages.REASON_INVALID_AFFINITY, messages.REASON_INVALID_SPEC})
MAX_MESSAGE = 1024
NAMES_THE_REQUEST = ('resource request "', 'spec.resources.requests "')
"""SPEC §2 names the offending request (a name longer than any resource name by its length only)."""


def received(values: list[Any], *, steer: bool = False) -> list[object]:
    """Each value as the scheduler receives it: JSON text (``to_json``) read by ``pure.readers.json.loads``.

    Records each class of hostile value as an event (and, with ``steer``, asks Hypothesis for examples
    holding more classes at once). ``loads`` raises nothing but ``ValueError`` (a malformed body, which
    the client reports as such); such a document is skipped.
    """
    out: list[object] = []
    held: set[str] = set()
    for value in values:
        text, kinds = to_json(value)
        held |= kinds
        try:
            out.append(loads(text))
        except ValueError:
            event("refused: the whole document")
    for kind in sorted(held):
        event(f"hostile: {kind}")
    if steer:
        target(float(len(held)), label="classes of hostile value in one example")
    return out


def decoded(values: list[Any]) -> list[Run | RuntimePod | Workspace]:
    out: list[Run | RuntimePod | Workspace] = []
    for value in values:
        result = decode_object(value)
        if is_successful(result):
            out.append(result.unwrap())
        else:
            event(f"refused: {result.failure().reason}")
    return out


def check_message(text: str) -> None:
    assert len(text.encode()) <= MAX_MESSAGE, f"unbounded message ({len(text.encode())} bytes)"
    if not text.startswith(NAMES_THE_REQUEST):
        assert MARK not in text, f"the message echoes hostile input: {text!r}"


def must_fail(run: Run) -> bool:
    """An invalid Run that the cycle must end ``Failed`` (SPEC §3.2–3.5)."""
    invalid = run.spec_error or run.requests_error or run.affinity_error
    return bool(run.status.pending and (run.runtime or run.spec_error) and not run.cancel_requested and invalid)


def check_plan(run: Run, plan: Plan) -> None:
    if must_fail(run):
        assert isinstance(plan, Fail), (plan, run.spec_error, run.requests_error, run.affinity_error)
    if isinstance(plan, Fail):
        assert plan.reason in FAIL_REASONS
        check_message(plan.message)
    if isinstance(plan, (Wait, Cancel)):
        check_message(plan.message)


def plan_and_write(objects: list[Run | RuntimePod | Workspace]) -> None:
    """Plan every decoded Run against the rest and render its status write; check what a Fail says."""
    state = EMPTY_STATE
    for obj in objects:
        state = apply(state, Event("ADDED", obj))
    assert from_objects(objects) is not None
    for run in (o for o in objects if isinstance(o, Run)):
        snapshot = take(state, EMPTY_LEDGER, RunKey(run.namespace, run.name), NOW, DEFAULT_CONFIG)
        planned = plan_cycle(snapshot)
        assert is_successful(planned), planned
        plan = planned.unwrap()
        current = snapshot.run
        if current is None:
            assert isinstance(plan, Skip)
            continue
        check_plan(current, plan)
        patch = status_for(plan, current, NOW)
        if isinstance(plan, (Delay, Skip)):
            assert patch is None
        elif patch is not None:
            body = json.loads(patch_body(patch, current.resource_version))
            assert body["status"]["phase"]
            if not isinstance(plan, Bind):
                check_message(body["status"]["message"] or "")


def _outcome(plan: Plan) -> str:
    return f"Run: Fail {plan.reason}" if isinstance(plan, Fail) else f"Run: {type(plan).__name__}"


@given(st.lists(st.one_of(runs(), pods(), workspaces()), max_size=8))
def test_hostile_objects_never_crash_the_pipeline(values: list[Any]) -> None:
    plan_and_write(decoded(received(values, steer=True)))


WORLDS = st.lists(
    st.one_of(plain_runs(), healthy_pods(), runs(identified=True), pods(identified=True), workspaces(identified=True)),
    min_size=1, max_size=10,
)
"""Runs, pods and workspaces of one namespace, each with a usable name, holding hostile values."""


@given(WORLDS)
def test_the_whole_step_over_hostile_json_fails_every_invalid_run_and_raises_nothing(values: list[Any]) -> None:
    """What a worker does per key (``step.transact``: sync, snapshot, plan, reserve; the write; settle),
    for every Pending Run in queue order, each cycle seeing the writes before it; then ``replay``'s read
    of each cycle record gives the record back."""
    objects = decoded(received(values, steer=True))
    # one object per kind and name, as the informer's cache holds them
    unique = list({(type(o).__name__, o.namespace, o.name): o for o in objects}.values())
    simulation = simulate(Scenario(NOW, DEFAULT_CONFIG, tuple(unique), (), None))
    for step, record in zip(simulation.steps, simulation.records, strict=True):
        assert is_successful(step.plan), step.plan
        plan = step.plan.unwrap()
        event(_outcome(plan))
        assert step.snapshot.run is not None  # the default cycles name only the Runs there are
        check_plan(step.snapshot.run, plan)
        if step.write is not None:
            body = json.loads(patch_body(step.write.patch, step.write.run.resource_version))
            if not isinstance(plan, Bind):
                check_message(body["status"]["message"] or "")
        line = encode_record(record)
        assert decode_record(line).unwrap() == record


@given(runs())
def test_every_run_decodes_or_is_refused_with_a_value(value: Any) -> None:
    for document in received([value]):
        result = decode_run(document)
        if not is_successful(result):
            assert result.failure().reason in ("NotAnObject", "MissingField", "WrongType", "UnknownKind")


@given(pods(), st.lists(runs(), max_size=2))
def test_malformed_pods_are_skipped_or_their_annotations_ignored(value: Any, others: list[Any]) -> None:
    for document in received([value]):
        result = decode_pod(document)
        if is_successful(result):
            pod = result.unwrap()
            assert pod.capacity.get("runs", 0) > 0, "runs capacity is always positive (default 2)"
            assert all(amount > 0 for amount in pod.capacity.values())
            assert all(resource and "/" not in resource for resource in pod.capacity)
            plan_and_write([pod, *decoded(received(others))])


@given(workspaces())
def test_workspaces_decode_totally(value: Any) -> None:
    for document in received([value]):
        decode_workspace(document)


@given(json_values(30))
def test_arbitrary_json_is_refused_not_raised(value: Any) -> None:
    for document in received([value]):
        for decoder in (decode_object, decode_run, decode_pod, decode_workspace):
            decoder(document)


def _run(spec: Any, labels: Any = None, name: str = "r") -> dict[str, Any]:
    return {
        "apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
        "metadata": {"name": name, "namespace": "default", "uid": "u-" + name, "resourceVersion": "7", "labels": labels or {}},
        "spec": spec,
    }


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p0", "namespace": "default", "uid": "pu", "labels": {"runtime": "python"}},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": "2999-01-01T00:00:00Z"}]},
    }


def _plan(run_value: dict[str, Any]) -> Any:
    objects = decoded([_pod(), run_value])
    state = from_objects(objects)
    meta = run_value["metadata"]
    return plan_cycle(take(state, EMPTY_LEDGER, RunKey("default", meta["name"]), NOW, DEFAULT_CONFIG)).unwrap()


def test_absurd_quantities_fail_invalid_resources() -> None:
    for text in ("500m", "-1", "abc", "NaN", "1.5.5", "0x10", ""):
        plan = _plan(_run({"runtime": "python", "resources": {"requests": {"runs": text}}}))
        assert isinstance(plan, Fail) and plan.reason == "InvalidResources", (text, plan)
        check_message(plan.message)


def test_huge_valid_quantities_wait_and_do_not_hang() -> None:
    """A huge but well-formed integer quantity is valid (SPEC §2): no pod fits it, so the Run waits."""
    for text in ("99999999999999999999Ei", "9" * 60, "1e60"):
        plan = _plan(_run({"runtime": "python", "resources": {"requests": {"runs": text}}}))
        assert isinstance(plan, Wait), (text, plan)
        check_message(plan.message)
    # beyond the parser's deliberate bounds (128 characters, 64 digits, exponent 64): refused in
    # constant time, not computed, and the Run fails naming the field (SPEC §1, revision 3)
    for text in ("9" * 4000, "9" * 5000, "1e300", "1e99999", "1e-99999", "1e" + "0" * 5000 + "1"):
        plan = _plan(_run({"runtime": "python", "resources": {"requests": {"runs": text}}}))
        assert isinstance(plan, Fail) and plan.reason == "InvalidSpec", (text, plan)
        assert plan.message.startswith('spec.resources.requests "runs" ')
        check_message(plan.message)


def test_a_hostile_resource_name_is_bounded_in_the_message() -> None:
    name = "x" * 5000
    plan = _plan(_run({"runtime": "python", "resources": {"requests": {name: "abc"}}}))
    assert isinstance(plan, Fail) and plan.reason == "InvalidResources"
    assert len(plan.message.encode()) <= MAX_MESSAGE


def test_selector_text_never_reaches_an_affinity_message() -> None:
    secret = MARK + '"}]) DROP TABLE'
    bad_terms = [
        {"labelSelector": {"matchLabels": {"app": secret}}, "topologyKey": secret},
        {"labelSelector": {"matchExpressions": [{"key": secret, "operator": secret, "values": [secret]}]}, "topologyKey": "kruntimes.io/runtime-pod"},
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [secret, 5]}]}, "topologyKey": "kruntimes.io/runtime-pod"},
        {"labelSelector": {}, "topologyKey": "kruntimes.io/runtime-pod"},
        {"labelSelector": {"matchLabels": {secret: 1}}, "topologyKey": "kruntimes.io/runtime-pod"},
    ]
    for term in bad_terms:
        for part in ("runAffinity", "runAntiAffinity"):
            for spec in (
                {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
                {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "runAffinityTerm": term}]},
            ):
                plan = _plan(_run({"runtime": "python", "affinity": {part: spec}}, labels={"app": secret}, name="r" + MARK.lower().encode().hex()))
                assert isinstance(plan, Fail) and plan.reason == "InvalidAffinity", (term, plan)
                check_message(plan.message)


def test_too_many_terms_fail_fast() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kruntimes.io/runtime-pod"}
    plan = _plan(_run({"runtime": "python", "affinity": {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term] * 10_000}}}))
    assert isinstance(plan, Fail) and plan.reason == "InvalidAffinity"


def test_deep_nesting_does_not_recurse_out() -> None:
    for depth in (100, 1000, 5000):
        value = _run({"runtime": "python", "affinity": deep(depth), "resources": deep(depth)})
        plan = _plan(value)
        assert isinstance(plan, Fail), plan
        check_message(plan.message)


def test_wrong_types_everywhere_fail_invalid_spec_not_crash() -> None:
    cases: list[Any] = [
        {"runtime": 5}, {"runtime": "python", "cancelRequested": "yes"}, {"runtime": "python", "workspace": "ws"},
        {"runtime": "python", "workspace": {"name": MARK, "kind": "Secret"}}, {"runtime": "python", "resources": [1, 2]},
        {"runtime": "python", "resources": {"requests": "lots"}}, "not an object", None, [],
    ]
    for spec in cases:
        plan = _plan(_run(spec))
        assert isinstance(plan, (Fail, Skip)), (spec, plan)
        if isinstance(plan, Fail):
            assert plan.reason in FAIL_REASONS
            check_message(plan.message)


def _pod_by_spec(value: Any) -> RuntimePod | None:
    """SPEC §1's reading of a Pod, transcribed naively: every condition and every annotation
    looked at, the first ``Ready`` and the first heartbeat condition taken."""
    if not isinstance(value, dict) or not isinstance(value.get("metadata"), dict):
        return None
    meta = value["metadata"]
    name, namespace, uid = meta.get("name"), meta.get("namespace", "default"), meta.get("uid")
    if not (isinstance(name, str) and name and isinstance(namespace, str) and namespace and isinstance(uid, str) and uid):
        return None
    status: dict[str, Any] = value["status"] if isinstance(value.get("status"), dict) else {}
    listed = status.get("conditions")
    conditions = [c for c in listed if isinstance(c, dict) and isinstance(c.get("type"), str)] if isinstance(listed, list) else []
    ready = next((c for c in conditions if c["type"] == "Ready"), None)
    heartbeat = next((c for c in conditions if c["type"] == HEARTBEAT_CONDITION), None)
    labels: dict[str, Any] = meta["labels"] if isinstance(meta.get("labels"), dict) else {}
    annotations: dict[str, Any] = meta["annotations"] if isinstance(meta.get("annotations"), dict) else {}
    runtime = labels.get("runtime")
    probe = heartbeat.get("lastProbeTime") if heartbeat is not None else None
    phase, version = status.get("phase"), meta.get("resourceVersion")
    return RuntimePod(
        namespace=namespace, name=name, uid=uid,
        resource_version=version if isinstance(version, str) else "",
        runtime=runtime if isinstance(runtime, str) else "",
        phase=phase if isinstance(phase, str) else "",
        deleting=meta.get("deletionTimestamp") is not None,
        ready=ready is not None and ready.get("status") == "True",
        heartbeat_ok=heartbeat is not None and heartbeat.get("status") == "True",
        heartbeat_at=parse_time(probe) if isinstance(probe, str) else None,
        capacity=capacity_from_annotations(frozen_labels({k: v for k, v in annotations.items() if isinstance(v, str)})),
    )


_CONDITION = st.fixed_dictionaries(
    {"type": st.sampled_from(["Ready", HEARTBEAT_CONDITION, "ContainersReady"])},
    optional={
        "status": st.sampled_from(["True", "False", True]),
        "lastProbeTime": st.sampled_from(["2025-01-01T00:00:00Z", "2025-01-01T00:00:05Z", "2025-01-01T01:00:00+01:00", "soon", 7]),
    },
)
_WELL_FORMED_POD = st.builds(
    lambda conditions, annotations, runtime: {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u", "resourceVersion": "3",
                     "labels": {"runtime": runtime, "app": "x"}, "annotations": annotations},
        "status": {"phase": "Running", "conditions": conditions},
    },
    st.lists(st.one_of(_CONDITION, json_values(2)), max_size=6),
    st.dictionaries(
        st.sampled_from(["kruntimes.io/capacity.runs", "kruntimes.io/capacity.gpu", "kruntimes.io/capacity.", "note"]),
        st.one_of(st.sampled_from(["1", "4", "0", "500m", "-2", "many"]), st.integers(-2, 4)),
        max_size=4,
    ),
    st.one_of(st.sampled_from(["python", "node"]), st.integers()),
)


@given(st.lists(st.one_of(_WELL_FORMED_POD, pods()), min_size=1, max_size=4))
def test_a_pod_decodes_to_what_a_reading_of_every_field_gives(values: list[Any]) -> None:
    # decode_pod reads only the fields a Runtime Pod is made of, and shares equal capacities
    # and probe times between pods: neither may change what a pod decodes to.
    for value in received(values):
        decoded = decode_pod(value).value_or(None)
        expected = _pod_by_spec(value)
        assert decoded == expected
        if decoded is not None and expected is not None:
            assert dict(decoded.capacity) == dict(expected.capacity)
