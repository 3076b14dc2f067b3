"""The runtime simulator's decisions, as tables: which pods a fleet wants, what status a pod or a Run gets next and when."""

from __future__ import annotations

from typing import Any

import pytest

from kruntimes.runtimesim import decide
from kruntimes.runtimesim.decide import Fleet, FleetPlan, Ignore, Owner, Park, RunSettings, Wait, Write

OWNER = Owner("kruntimes.io/v1alpha1", "Runtime", "python", "uid-1")
STYLE = decide.PodStyle(manager="sim", runtime_image="rt", runtimed_image="rtd", scheduling_gate="kruntimes.io/runtime-sim")


def runtime(replicas: object = 2, *, deleting: bool = False, capacity: object = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "python", "namespace": "ns", "uid": "uid-1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "runtime", "image": "img"}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    if capacity is not None:
        spec["capacity"] = {"resources": capacity}
    return {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Runtime", "metadata": meta, "spec": spec}


@pytest.mark.parametrize(
    ("obj", "replicas", "capacity"),
    [
        (runtime(3, capacity={"runs": "4", "gpu": 1}), 3, (("gpu", "1"), ("runs", "4"))),
        (runtime(None), 1, ()),
        (runtime(-2), 0, ()),
        (runtime(True), 1, ()),
        (runtime("3"), 1, ()),
        (runtime(3, deleting=True), 0, ()),
        (runtime(2, capacity=["runs"]), 2, ()),
    ],
    ids=["replicas-and-capacity", "replicas-default-1", "negative-is-none", "a-bool-is-not-a-count", "a-string-is-not-a-count", "deleting-wants-none", "malformed-capacity-ignored"],
)
def test_a_runtime_wants_its_replicas_with_its_capacity(obj: dict[str, Any], replicas: int, capacity: tuple[tuple[str, str], ...]) -> None:
    fleet = decide.fleet_of_runtime(obj)
    assert (fleet.namespace, fleet.runtime, fleet.replicas, fleet.capacity, fleet.owner) == ("ns", "python", replicas, capacity, OWNER)


def pod(name: str, *, owner: Owner | None = OWNER, phase: str | None = "Running", annotations: dict[str, str] | None = None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"pod-{name}", "annotations": {"kruntimes.io/capacity.runs": "2"} if annotations is None else annotations}
    if owner is not None:
        meta["ownerReferences"] = [owner.reference()]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"containers": [{"name": "runtime"}]}, "status": {} if phase is None else {"phase": phase}}


FLEET = Fleet("ns", "python", 2, (("runs", "2"),), OWNER)
OTHER_UID = Owner("kruntimes.io/v1alpha1", "Runtime", "python", "uid-0")


@pytest.mark.parametrize(
    ("fleet", "pods", "plan"),
    [
        (FLEET, {}, FleetPlan(create=("python-0", "python-1"))),
        (FLEET, {"python-0": pod("python-0"), "python-1": pod("python-1")}, FleetPlan()),
        (FLEET, {"python-0": pod("python-0"), "python-1": pod("python-1"), "python-2": pod("python-2")}, FleetPlan(delete=("python-2",))),
        (FLEET, {"python-0": pod("python-0", owner=OTHER_UID)}, FleetPlan(delete=("python-0",), create=("python-1",))),
        (FLEET, {"python-0": pod("python-0", deleting=True)}, FleetPlan(create=("python-1",))),
        (FLEET, {"python-0": pod("python-0", phase=None), "python-1": pod("python-1", phase="Pending")}, FleetPlan(start=("python-0", "python-1"))),
        (
            FLEET,
            {"python-0": pod("python-0", annotations={"kruntimes.io/capacity.runs": "5", "kruntimes.io/capacity.gpu": "1", "team": "a"}), "python-1": pod("python-1")},
            FleetPlan(annotate=(("python-0", {"kruntimes.io/capacity.runs": "2", "team": "a"}),)),
        ),
        (Fleet("ns", "python", 1, (("runs", "2"),), None), {"python-0": pod("python-0", owner=None)}, FleetPlan()),
        (Fleet("ns", "python", 0, (), Owner("kruntimes.io/v1alpha1", "Runtime", "python", "")), {"python-0": pod("python-0"), "python-1": pod("python-1")}, FleetPlan(delete=("python-0", "python-1"))),
    ],
    ids=[
        "nothing-yet-creates-all",
        "all-there-nothing-to-do",
        "beyond-replicas-deleted",
        "a-replaced-runtimes-pod-is-deleted-and-its-name-made-again",
        "a-pod-being-deleted-is-left-to-finish-and-its-name-not-reused",
        "pods-not-running-are-started",
        "a-capacity-change-re-annotates-keeping-other-annotations",
        "a-command-line-fleet-owns-pods-without-owner",
        "a-runtime-that-is-gone-wants-none",
    ],
)
def test_a_fleet_plan_is_what_its_pods_need(fleet: Fleet, pods: dict[str, dict[str, Any]], plan: FleetPlan) -> None:
    assert decide.plan_fleet(fleet, pods) == plan


def test_a_pod_manifest_is_labelled_annotated_owned_and_gated() -> None:
    manifest = decide.pod_manifest(FLEET, "python-0", STYLE)
    meta, spec = manifest["metadata"], manifest["spec"]
    assert meta["labels"] == {"runtime": "python", "app.kubernetes.io/managed-by": "sim"}
    assert meta["annotations"] == {"kruntimes.io/capacity.runs": "2"}
    assert meta["ownerReferences"] == [OWNER.reference()]
    assert [c["name"] for c in spec["containers"]] == ["runtime", "runtimed"]
    assert spec["schedulingGates"] == [{"name": "kruntimes.io/runtime-sim"}] and "nodeName" not in spec


def test_a_pod_manifest_for_the_dev_cluster_names_its_node_and_keeps_the_template() -> None:
    fleet = decide.fleet_of_runtime(runtime(1))
    style = decide.PodStyle(manager="dev", runtime_image="rt", runtimed_image="rtd", node_name="devcluster-node")
    manifest = decide.pod_manifest(fleet, "python-0", style)
    assert manifest["spec"]["nodeName"] == "devcluster-node" and "schedulingGates" not in manifest["spec"]
    assert manifest["spec"]["containers"][0] == {"name": "runtime", "image": "img"}
    assert fleet.template["spec"]["containers"] == [{"name": "runtime", "image": "img"}]  # the input is not changed


def test_an_annotation_patch_sets_what_changed_and_removes_what_went() -> None:
    current = {"kruntimes.io/capacity.runs": "5", "kruntimes.io/capacity.gpu": "1", "team": "a"}
    desired = {"kruntimes.io/capacity.runs": "2", "team": "a"}
    assert decide.annotation_patch(current, desired) == {"kruntimes.io/capacity.runs": "2", "kruntimes.io/capacity.gpu": None}


def conditions(status: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (status or {}).get("conditions", [])}


def test_a_pending_pod_becomes_running_ready_and_heartbeating_in_one_status() -> None:
    status = decide.pod_status(pod("python-0", phase="Pending"), "T1", beat=True)
    assert status is not None and status["phase"] == "Running" and status["startTime"] == "T1"
    by_type = conditions(status)
    assert all(by_type[t]["status"] == "True" for t in decide.READY_CONDITIONS)
    assert by_type[decide.HEARTBEAT] == {"type": decide.HEARTBEAT, "status": "True", "reason": "Heartbeat", "message": "runtimed is serving", "lastProbeTime": "T1", "lastTransitionTime": "T1"}
    assert [c["name"] for c in status["containerStatuses"]] == ["runtime"]


def test_a_heartbeat_moves_only_the_probe_time_and_without_a_beat_nothing_changes() -> None:
    first = decide.pod_status(pod("python-0", phase="Pending"), "T1", beat=True)
    assert first is not None
    running = {**pod("python-0"), "status": first}
    later = decide.pod_status(running, "T2", beat=True)
    assert later is not None
    heartbeat = conditions(later)[decide.HEARTBEAT]
    assert (heartbeat["lastProbeTime"], heartbeat["lastTransitionTime"]) == ("T2", "T1")
    assert conditions(later)["Ready"]["lastTransitionTime"] == "T1" and later["startTime"] == "T1"
    assert decide.pod_status(running, "T2", beat=False) is None


def run(phase: str | None = "Scheduled", *, pod_name: str = "python-0", cancel: bool = False, uid: str = "run-1") -> dict[str, Any]:
    status: dict[str, Any] = {} if phase is None else {"phase": phase, "assignedPod": pod_name}
    return {"metadata": {"name": "r", "namespace": "ns", "uid": uid}, "spec": {"runtime": "python", "cancelRequested": cancel}, "status": status}


SETTINGS = RunSettings(duration=2.0)


@pytest.mark.parametrize(
    ("obj", "live", "started", "now", "settings", "step"),
    [
        (run(None), True, None, 10.0, SETTINGS, Ignore()),
        (run("Pending", pod_name=""), True, None, 10.0, SETTINGS, Ignore()),
        (run("Succeeded"), True, 1.0, 10.0, SETTINGS, Ignore()),
        (run("Scheduled"), False, None, 10.0, SETTINGS, Park("python-0")),
        (run("Running"), False, 9.0, 10.0, SETTINGS, Park("python-0")),
        (run("Scheduled"), True, None, 10.0, SETTINGS, Write("Running", 10.0)),
        (run("Running"), True, None, 10.0, SETTINGS, Wait(12.0, 10.0)),
        (run("Running"), True, 9.0, 10.0, SETTINGS, Wait(11.0, 9.0)),
        (run("Running"), True, 8.0, 10.0, SETTINGS, Write("Succeeded", None)),
        (run("Running"), True, 7.0, 10.0, RunSettings(2.0, fail_percent=100), Write("Failed", None)),
        (run("Running", cancel=True), True, 9.0, 10.0, SETTINGS, Write("Cancelled", None)),
        (run("Scheduled", cancel=True), True, None, 10.0, SETTINGS, Write("Cancelled", None)),
    ],
    ids=[
        "unbound-is-not-ours",
        "pending-is-not-ours",
        "finished-is-not-ours",
        "bound-to-a-pod-not-live-waits-for-it",
        "running-on-a-pod-gone-waits-for-it",
        "scheduled-starts-now",
        "running-unseen-starts-over-now",
        "running-waits-for-its-end",
        "running-ends-on-time",
        "running-fails-when-its-uid-draws-failure",
        "cancel-requested-while-running-is-cancelled",
        "cancel-requested-before-it-starts-is-cancelled",
    ],
)
def test_a_bound_run_steps_through_its_phases_on_time(obj: dict[str, Any], live: bool, started: float | None, now: float, settings: RunSettings, step: decide.RunStep) -> None:
    assert decide.run_step(obj, pod_live=live, started=started, now=now, settings=settings) == step


def test_the_outcome_is_chosen_by_uid_in_the_given_share() -> None:
    uids = [f"uid-{i}" for i in range(1000)]
    assert all(decide.outcome(u, 0) == "Succeeded" for u in uids)
    assert all(decide.outcome(u, 100) == "Failed" for u in uids)
    failed = sum(decide.outcome(u, 30) == "Failed" for u in uids)
    assert 200 < failed < 400
    assert [decide.outcome(u, 30) for u in uids] == [decide.outcome(u, 30) for u in uids]


@pytest.mark.parametrize(
    ("phase", "running", "completed"),
    [
        ("Running", ("True", "Started", "running on runtime pod python-0"), None),
        ("Succeeded", ("False", "Completed", "run finished"), ("True", "Succeeded", "run succeeded")),
        ("Failed", ("False", "Failed", "run failed"), ("False", "Failed", "run failed")),
        ("Cancelled", ("False", "Cancelled", "cancelled by user"), ("False", "Cancelled", "cancelled by user")),
    ],
)
def test_a_runs_status_says_how_it_ran_and_when_it_ended(phase: str, running: tuple[str, str, str], completed: tuple[str, str, str] | None) -> None:
    before = run("Scheduled")
    before["status"]["conditions"] = [{"type": "Scheduled", "status": "True", "reason": "Assigned", "lastTransitionTime": "T0"}]
    status = decide.run_status(before, phase, "T1")
    by_type = conditions(status)
    assert status["phase"] == phase and status["assignedPod"] == "python-0"
    assert by_type["Scheduled"]["lastTransitionTime"] == "T0"
    assert (by_type["Running"]["status"], by_type["Running"]["reason"], by_type["Running"]["message"]) == running
    if completed is None:
        assert "Completed" not in by_type and "completionTime" not in status
    else:
        assert (by_type["Completed"]["status"], by_type["Completed"]["reason"], by_type["Completed"]["message"]) == completed
        assert status["completionTime"] == "T1"
    assert before["status"]["phase"] == "Scheduled"  # the input is not changed


def test_set_condition_keeps_the_transition_time_while_the_status_holds() -> None:
    first = decide.set_condition([], "Ready", "True", "t1")
    same = decide.set_condition(first, "Ready", "True", "t2", probe=True)
    flipped = decide.set_condition(same, "Ready", "False", "t3")
    assert same[0]["lastTransitionTime"] == "t1" and same[0]["lastProbeTime"] == "t2"
    assert flipped[0]["lastTransitionTime"] == "t3"


def test_runtime_status_reports_ready_replicas_only_when_they_change() -> None:
    obj = runtime(2)
    pods = {"python-0": pod("python-0"), "python-1": pod("python-1", phase="Pending"), "python-7": pod("python-7")}
    ready = decide.ready_replicas(decide.fleet_of_runtime(obj), pods)
    assert ready == 1
    assert decide.runtime_status(obj, ready) == {"readyReplicas": 1}
    assert decide.runtime_status({**obj, "status": {"readyReplicas": 1}}, ready) is None
