"""The runtime simulator: Runtimes become Running, Ready, heartbeating Runtime Pods; bound Runs get executed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kruntimes.devcluster import DevCluster, SimulatorSettings
from kruntimes.devcluster.simulator import HEARTBEAT, PODS, RUNS, USER_AGENT, RuntimeSimulator, SimulatorCounters, set_condition
from kruntimes.devcluster.store import WriteContext
from kruntimes.devcluster.types import ObjectKey

from .helpers import GROUP, VERSION, Kube, as_obj, close_api, kube_for, wait_until


def _pods(kube: Kube, runtime: str) -> list[client.V1Pod]:
    return list(kube.core.list_namespaced_pod("default", label_selector=f"runtime={runtime}").items)


def _running(kube: Kube, runtime: str, count: int) -> list[client.V1Pod] | None:
    pods = _pods(kube, runtime)
    ok = len(pods) == count and all(p.status is not None and p.status.phase == "Running" for p in pods)
    return pods if ok else None


def _condition(pod: client.V1Pod, kind: str) -> client.V1PodCondition:
    assert pod.status is not None and pod.status.conditions is not None
    return next(c for c in pod.status.conditions if c.type == kind)


def _in_phase(kube: Kube, name: str, *phases: str) -> dict[str, Any] | None:
    run = kube.run(name)
    return run if run.get("status", {}).get("phase") in phases else None


def _scale(kube: Kube, name: str, replicas: int) -> None:
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runtimes", name, {"spec": {"replicas": replicas}})


def test_a_runtime_gets_its_replicas_as_running_ready_heartbeating_pods_with_capacity(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    sim_cluster.add_runtime("python", replicas=3, capacity={"runs": "2", "gpu": "1"})
    pods = wait_until(lambda: _running(sim_kube, "python", 3), what="3 running pods")
    assert sorted(p.metadata.name or "" for p in pods if p.metadata) == ["python-0", "python-1", "python-2"]
    for pod in pods:
        assert pod.metadata is not None and pod.metadata.annotations is not None
        assert pod.metadata.annotations["kruntimes.io/capacity.runs"] == "2"
        assert pod.metadata.annotations["kruntimes.io/capacity.gpu"] == "1"
        assert _condition(pod, "Ready").status == "True"
        heartbeat = _condition(pod, HEARTBEAT)
        assert heartbeat.status == "True" and heartbeat.last_probe_time is not None
    runtime = as_obj(sim_kube.custom.get_namespaced_custom_object(GROUP, VERSION, "default", "runtimes", "python"))
    wait_until(lambda: as_obj(sim_kube.custom.get_namespaced_custom_object(GROUP, VERSION, "default", "runtimes", "python")).get("status", {}).get("readyReplicas") == 3, what="runtime status")
    assert runtime["spec"]["replicas"] == 3


def test_heartbeats_advance_while_the_pod_lives(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    sim_cluster.add_runtime("python", replicas=1)
    pod = wait_until(lambda: _running(sim_kube, "python", 1), what="a running pod")[0]
    first = _condition(pod, HEARTBEAT).last_probe_time
    assert first is not None

    def advanced() -> bool:
        later = _condition(sim_kube.core.read_namespaced_pod("python-0", "default"), HEARTBEAT).last_probe_time
        return later is not None and later > first

    wait_until(advanced, timeout=5, what="the heartbeat to advance")


def test_a_paused_heartbeat_stops_advancing(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    assert sim_cluster.simulator is not None
    sim_cluster.add_runtime("python", replicas=1)
    wait_until(lambda: _running(sim_kube, "python", 1), what="a running pod")
    sim_cluster.simulator.pause_heartbeat("default", "python-0")
    start = sim_cluster.store.resource_version
    sim_cluster.simulator.reconcile()
    assert not [r for r in sim_cluster.history(start) if r.name == "python-0" and r.verb == "update"]


def test_scaling_a_runtime_adds_and_removes_pods_and_deleting_it_removes_them_all(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    sim_cluster.add_runtime("python", replicas=1)
    wait_until(lambda: _running(sim_kube, "python", 1), what="1 pod")
    _scale(sim_kube, "python", 3)
    wait_until(lambda: _running(sim_kube, "python", 3), what="3 pods")
    _scale(sim_kube, "python", 2)
    pods = wait_until(lambda: _running(sim_kube, "python", 2), what="2 pods")
    assert sorted(p.metadata.name or "" for p in pods if p.metadata) == ["python-0", "python-1"]
    sim_kube.custom.delete_namespaced_custom_object(GROUP, VERSION, "default", "runtimes", "python")
    wait_until(lambda: _pods(sim_kube, "python") == [], what="the pods to go")


def test_a_capacity_change_reaches_the_pods_annotations(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    sim_cluster.add_runtime("python", replicas=1, capacity={"runs": "2"})
    wait_until(lambda: _running(sim_kube, "python", 1), what="a pod")
    sim_kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runtimes", "python", {"spec": {"capacity": {"resources": {"runs": "5"}}}})

    def annotated() -> bool:
        meta = sim_kube.core.read_namespaced_pod("python-0", "default").metadata
        return meta is not None and (meta.annotations or {}).get("kruntimes.io/capacity.runs") == "5"

    wait_until(annotated, what="the new capacity annotation")


def test_a_run_bound_to_a_simulated_pod_runs_and_then_succeeds(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    sim_cluster.add_runtime("python", replicas=1)
    wait_until(lambda: _running(sim_kube, "python", 1), what="a pod")
    sim_kube.create_run("job")
    sim_kube.patch_run_status("job", {"phase": "Scheduled", "assignedPod": "python-0"})

    def finished() -> dict[str, Any] | None:
        run = sim_kube.run("job")
        return run if run["status"].get("phase") == "Succeeded" else None

    run = wait_until(finished, what="the run to succeed")
    assert run["status"]["completionTime"]
    phases = [r.object["status"]["phase"] for r in sim_cluster.history() if r.name == "job" and r.subresource == "status"]
    assert phases == ["Scheduled", "Running", "Succeeded"]
    assert {r.user_agent for r in sim_cluster.history() if r.name == "job" and r.object.get("status", {}).get("phase") in ("Running", "Succeeded")} == {USER_AGENT}


def test_pods_not_owned_by_a_runtime_are_left_alone(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="mine", labels={"runtime": "python"}), spec=client.V1PodSpec(containers=[client.V1Container(name="c")]))
    sim_kube.core.create_namespaced_pod("default", pod)
    sim_cluster.add_runtime("python", replicas=1)
    wait_until(lambda: len(_pods(sim_kube, "python")) == 2, what="the simulated pod beside the user's")
    mine = sim_kube.core.read_namespaced_pod("mine", "default")
    assert mine.status is not None and mine.status.phase == "Pending"


def test_set_condition_keeps_the_transition_time_while_the_status_holds() -> None:
    first = set_condition([], "Ready", "True", "t1")
    same = set_condition(first, "Ready", "True", "t2", probe=True)
    flipped = set_condition(same, "Ready", "False", "t3")
    assert same[0]["lastTransitionTime"] == "t1" and same[0]["lastProbeTime"] == "t2"
    assert flipped[0]["lastTransitionTime"] == "t3"


def _work_to_execute_one_run(pending: int) -> tuple[SimulatorCounters, SimulatorCounters]:
    """Counters spent by two idle passes, then by executing one Run, beside ``pending`` Pending Runs."""
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0, execute_runs=0.05)) as cluster:
        sim = cluster.simulator
        run_rd = cluster.registry.storage(RUNS)
        assert sim is not None and run_rd is not None
        cluster.add_runtime("python", replicas=1)
        wait_until(lambda: (cluster.store.read(PODS, ObjectKey("default", "python-0")) or {}).get("status", {}).get("phase") == "Running", what="a running pod")
        context = WriteContext("create", user_agent="test")
        for i in range(pending):
            cluster.service.create(run_rd, "default", {"metadata": {"name": f"idle-{i}"}, "spec": {"runtime": "python", "mode": {"task": {}}}}, context)
        job = cluster.service.create(run_rd, "default", {"metadata": {"name": "job"}, "spec": {"runtime": "python", "mode": {"task": {}}}}, context)
        sim.reconcile()  # take in the creates
        start = dataclasses.replace(sim.counters)
        sim.reconcile()
        sim.reconcile()
        idle = dataclasses.replace(sim.counters)
        bind = {**job, "status": {"phase": "Scheduled", "assignedPod": "python-0"}}
        cluster.service.update(run_rd, "default", "job", bind, WriteContext("update", "status", "test"))
        wait_until(lambda: (cluster.store.read(RUNS, ObjectKey("default", "job")) or {}).get("status", {}).get("phase") == "Succeeded", what="the run to succeed")
        sim.reconcile()
        done = dataclasses.replace(sim.counters)

    def spent(a: SimulatorCounters, b: SimulatorCounters) -> SimulatorCounters:
        return SimulatorCounters(**{f.name: getattr(b, f.name) - getattr(a, f.name) for f in dataclasses.fields(SimulatorCounters)})

    return spent(start, idle), spent(idle, done)


@pytest.mark.parametrize("pending", [100, 10_000])
def test_executing_a_run_examines_only_that_run_however_many_pending_runs_exist(pending: int) -> None:
    idle, one_run = _work_to_execute_one_run(pending)
    assert idle.runs_examined == 0
    # Scheduled -> Running on its bind event, the Running event, the completion timer: three looks at one Run.
    assert one_run.runs_examined == 3
    assert one_run.run_events <= 4


def test_a_runs_end_is_waited_for_to_the_millisecond_and_heartbeats_in_batches() -> None:
    """A runtime reports a Run's end when it happens: the simulator must not sleep past it to batch
    heartbeats (a late end holds the slot and lengthens every drain), yet heartbeats alone must
    still be written in batches rather than one wake-up each."""
    with DevCluster.start(simulator=None) as cluster:
        sim = RuntimeSimulator(cluster.service, SimulatorSettings(heartbeat_interval=0.01, execute_runs=0.02))  # driven by hand: no thread
        run_rd = cluster.registry.storage(RUNS)
        assert run_rd is not None
        cluster.add_runtime("python", replicas=1)
        sim.reconcile()  # the pod is created and marked Running
        sim.reconcile()  # its heartbeat is due now
        assert (cluster.store.read(PODS, ObjectKey("default", "python-0")) or {}).get("status", {}).get("phase") == "Running"
        # only heartbeats are due, every 10 ms: they gather for the batch
        assert sim.reconcile() >= 0.05
        job = cluster.service.create(run_rd, "default", {"metadata": {"name": "job"}, "spec": {"runtime": "python", "mode": {"task": {}}}}, WriteContext("create", user_agent="test"))
        cluster.service.update(run_rd, "default", "job", {**job, "status": {"phase": "Scheduled", "assignedPod": "python-0"}}, WriteContext("update", "status", "test"))
        wait = sim.reconcile()  # starts the Run: it ends 20 ms from now
        assert (cluster.store.read(RUNS, ObjectKey("default", "job")) or {}).get("status", {}).get("phase") == "Running"
        assert wait <= 0.02


def test_a_run_bound_before_its_pod_is_running_is_executed_once_the_pod_runs(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    sim_kube.create_run("early")
    sim_kube.patch_run_status("early", {"phase": "Scheduled", "assignedPod": "python-0"})
    sim_cluster.add_runtime("python", replicas=1)

    def finished() -> bool:
        return bool(sim_kube.run("early")["status"].get("phase") == "Succeeded")

    wait_until(finished, what="the early run to succeed")


def test_a_recreated_pod_is_running_again_and_keeps_its_heartbeat(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    sim_cluster.add_runtime("python", replicas=1)
    first = wait_until(lambda: _running(sim_kube, "python", 1), what="a running pod")[0]
    sim_kube.core.delete_namespaced_pod("python-0", "default")

    def replaced() -> client.V1Pod | None:
        pods = _running(sim_kube, "python", 1)
        return pods[0] if pods and pods[0].metadata and first.metadata and pods[0].metadata.uid != first.metadata.uid else None

    pod = wait_until(replaced, what="a new python-0")
    beat = _condition(pod, HEARTBEAT).last_probe_time
    assert beat is not None

    def advanced() -> bool:
        later = _condition(sim_kube.core.read_namespaced_pod("python-0", "default"), HEARTBEAT).last_probe_time
        return later is not None and later > beat

    wait_until(advanced, timeout=5, what="the new pod's heartbeat to advance")


def test_the_simulator_keeps_reconciling_after_its_watch_is_dropped(sim_kube: Kube, sim_cluster: DevCluster) -> None:
    sim_cluster.add_runtime("python", replicas=1)
    wait_until(lambda: _running(sim_kube, "python", 1), what="1 pod")
    assert sim_cluster.faults.drop_watches() >= 1
    _scale(sim_kube, "python", 2)
    wait_until(lambda: _running(sim_kube, "python", 2), what="2 pods after the watch was dropped")


def test_a_running_run_whose_cancellation_is_requested_ends_cancelled(tmp_path: Path) -> None:
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0, execute_runs=600.0)) as cluster:
        kube = kube_for(cluster.kubeconfig_path(tmp_path))
        try:
            cluster.add_runtime("python", replicas=1)
            wait_until(lambda: _running(kube, "python", 1), what="a pod")
            kube.create_run("job")
            kube.patch_run_status("job", {"phase": "Scheduled", "assignedPod": "python-0"})
            wait_until(lambda: kube.run("job")["status"].get("phase") == "Running", what="the run to start")
            kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runs", "job", {"spec": {"cancelRequested": True}})
            run = wait_until(lambda: _in_phase(kube, "job", "Cancelled"), what="the run to be cancelled")
            assert run["status"]["completionTime"]
            running = next(c for c in run["status"]["conditions"] if c["type"] == "Running")
            assert (running["status"], running["reason"]) == ("False", "Cancelled")
        finally:
            close_api(kube.api)


def test_runs_end_failed_in_the_share_asked_for(tmp_path: Path) -> None:
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0, execute_runs=0.05, fail_percent=100)) as cluster:
        kube = kube_for(cluster.kubeconfig_path(tmp_path))
        try:
            cluster.add_runtime("python", replicas=1)
            wait_until(lambda: _running(kube, "python", 1), what="a pod")
            kube.create_run("job")
            kube.patch_run_status("job", {"phase": "Scheduled", "assignedPod": "python-0"})
            run = wait_until(lambda: _in_phase(kube, "job", "Succeeded", "Failed"), what="the run to end")
            assert run["status"]["phase"] == "Failed"
        finally:
            close_api(kube.api)
