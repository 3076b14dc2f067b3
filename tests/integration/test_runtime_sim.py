"""The runtime simulator as an API client, on the dev cluster without its in-process simulator and
on the real kube-apiserver.

Its requests go through ``server.faults`` (on the real server, the fault proxy), which also records
which of them the server accepted. ``kruntimes runtime-sim`` as an operator runs it, under the RBAC
docs/operations.md gives it, is in tests/realserver/test_runtime_sim.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kruntimes.devcluster import FaultRule
from kruntimes.devcluster.faults import RequestInfo
from kruntimes.kubeclient.kube import PODS, RUNS, Kube, load_configuration
from kruntimes.runtimesim import decide
from kruntimes.runtimesim.client import MANAGER, USER_AGENT, ClientSettings, SimulatorClient, TokenBucket, fleets
from tests.builders import make_run

from .conftest import SchedulerFactory, Server
from .helpers import NS, at, get_run, max_usage_by_pod, run_writes, set_run_phase, wait_until
from .servers import accepted_writes, proxied_kubeconfig

ClientFactory = Callable[..., SimulatorClient]


@pytest.fixture
def sim(bare_server: Server, tmp_path: Path) -> Iterator[ClientFactory]:
    """Start simulator clients against ``bare_server`` (stopped at teardown)."""
    started: list[tuple[SimulatorClient, Kube]] = []

    def start(runtimes: tuple[str, ...] = ("python",), replicas: int = 2, capacity: dict[str, str] | None = None, **overrides: Any) -> SimulatorClient:
        loaded = load_configuration(str(proxied_kubeconfig(bare_server, tmp_path))).unwrap()
        kube = Kube(loaded.configuration, request_timeout=10, user_agent=USER_AGENT)
        options: dict[str, Any] = {
            "namespace": NS,
            "fleets": fleets(NS, runtimes, replicas, capacity or {"runs": "2"}),
            "heartbeat_interval": 1.0,
            "runs": decide.RunSettings(duration=0.2),
            "qps": 0.0,
        }
        options.update(overrides)
        client = SimulatorClient(kube, ClientSettings(**options))
        client.start()
        started.append((client, kube))
        assert client.wait_synced(10)
        return client

    yield start
    for client, kube in started:
        client.stop()
        kube.close()


def pods(kube: Kube, runtime: str = "python") -> dict[str, dict[str, Any]]:
    listed = kube.list(PODS.path(NS), {"labelSelector": f"runtime={runtime}"}).unwrap()[0]
    return {str(at(p, "metadata", "name")): dict(p) for p in listed}


def ready_pods(kube: Kube, count: int, runtime: str = "python") -> dict[str, dict[str, Any]] | None:
    found = pods(kube, runtime)
    return found if len(found) == count and all(decide.is_ready(p) for p in found.values()) else None


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in pod["status"]["conditions"] if c["type"] == kind)


def phase(kube: Kube, name: str) -> str:
    return str(at(get_run(kube, name), "status", "phase") or "")


def simulator_writes(server: Server) -> list[RequestInfo]:
    return [w for w in accepted_writes(server) if w.user_agent == USER_AGENT]


def test_pods_are_created_running_ready_with_capacity_and_a_heartbeat_that_advances(bare_server_kube: Kube, sim: ClientFactory) -> None:
    bare_kube = bare_server_kube
    sim(replicas=3, capacity={"runs": "2", "gpu": "1"}, heartbeat_interval=0.5)
    found = wait_until(lambda: ready_pods(bare_kube, 3), timeout=30, what="3 ready pods")
    assert sorted(found) == ["python-0", "python-1", "python-2"]
    for pod in found.values():
        meta = pod["metadata"]
        assert meta["annotations"] == {"kruntimes.io/capacity.gpu": "1", "kruntimes.io/capacity.runs": "2"}
        assert meta["labels"] == {"runtime": "python", "app.kubernetes.io/managed-by": MANAGER}
        assert pod["spec"]["schedulingGates"] == [{"name": "kruntimes.io/runtime-sim"}]
        assert condition(pod, decide.HEARTBEAT)["status"] == "True"
    first = condition(found["python-0"], decide.HEARTBEAT)["lastProbeTime"]
    wait_until(lambda: condition(pods(bare_kube)["python-0"], decide.HEARTBEAT)["lastProbeTime"] > first, timeout=10, what="the heartbeat to advance")


def test_runs_the_scheduler_binds_run_and_succeed_without_overcommitting_a_pod(
    bare_server: Server, bare_server_kube: Kube, sim: ClientFactory, bare_server_scheduler: SchedulerFactory
) -> None:
    bare_kube = bare_server_kube
    sim(replicas=2, capacity={"runs": "2"})
    wait_until(lambda: ready_pods(bare_kube, 2), timeout=30, what="2 ready pods")
    bare_server_scheduler()
    names = [f"r{i}" for i in range(12)]
    for name in names:
        make_run(bare_kube, name)
    wait_until(lambda: all(phase(bare_kube, n) == "Succeeded" for n in names), timeout=60, what="every Run to succeed")
    assert max(max_usage_by_pod(bare_server).values()) <= 2
    phases: list[str] = []
    for write in run_writes(bare_server):  # every committed version of r0, in commit order
        now = str(at(write.object, "status", "phase") or "")
        if write.name == "r0" and (not phases or phases[-1] != now):
            phases.append(now)
    assert phases == ["", "Scheduled", "Running", "Succeeded"]
    # the scheduler bound it, the simulator ran it and ended it
    def r0_status_writes() -> list[str] | None:  # the proxy records the last write once its answer arrives
        writes = [w.user_agent for w in accepted_writes(bare_server) if w.name == "r0" and w.resource == "runs" and w.subresource == "status"]
        return writes if len(writes) >= 3 else None

    status_writes = wait_until(r0_status_writes, timeout=10, what="the record of r0's three status writes")
    assert status_writes == ["kruntimes-scheduler/test-0", USER_AGENT, USER_AGENT]


def test_a_bound_run_whose_cancellation_is_requested_is_cancelled(bare_server_kube: Kube, sim: ClientFactory) -> None:
    bare_kube = bare_server_kube
    sim(replicas=1, runs=decide.RunSettings(duration=600.0))
    wait_until(lambda: ready_pods(bare_kube, 1), timeout=30, what="a ready pod")
    make_run(bare_kube, "job")
    set_run_phase(bare_kube, "job", "Scheduled", pod="python-0")
    wait_until(lambda: phase(bare_kube, "job") == "Running", timeout=30, what="the run to start")
    current = get_run(bare_kube, "job")
    bare_kube.patch(RUNS.path(NS, "job"), json.dumps({"spec": {"cancelRequested": True}})).unwrap()
    wait_until(lambda: phase(bare_kube, "job") == "Cancelled", timeout=30, what="the run to be cancelled")
    assert at(current, "status", "phase") == "Running"


def test_runs_end_failed_in_the_share_asked_for(bare_server_kube: Kube, sim: ClientFactory) -> None:
    bare_kube = bare_server_kube
    sim(replicas=1, runs=decide.RunSettings(duration=0.05, fail_percent=100))
    wait_until(lambda: ready_pods(bare_kube, 1), timeout=30, what="a ready pod")
    make_run(bare_kube, "job")
    set_run_phase(bare_kube, "job", "Scheduled", pod="python-0")
    wait_until(lambda: phase(bare_kube, "job") in ("Succeeded", "Failed"), timeout=30, what="the run to end")
    assert phase(bare_kube, "job") == "Failed"


def test_a_pod_it_did_not_create_is_never_touched(bare_server: Server, bare_server_kube: Kube, sim: ClientFactory) -> None:
    bare_kube = bare_server_kube
    theirs = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "python-0", "namespace": NS, "labels": {"runtime": "python"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    bare_kube.create(PODS.path(NS), theirs).unwrap()
    client = sim(replicas=2)
    wait_until(lambda: decide.is_ready(pods(bare_kube).get("python-1", {})), timeout=30, what="python-1 ready")
    wait_until(client.fleets_ready, timeout=30, what="the fleet to count itself ready without the foreign pod")
    assert [w for w in simulator_writes(bare_server) if w.name == "python-0"] == []
    assert [w for w in simulator_writes(bare_server) if w.name == "python-1"], "its own pod's writes are recorded"
    assert at(pods(bare_kube)["python-0"], "status", "phase") != "Running"


def test_a_conflict_is_retried_from_a_fresh_read(bare_server: Server, bare_server_kube: Kube, sim: ClientFactory) -> None:
    bare_kube = bare_server_kube
    client = sim(replicas=1)
    wait_until(lambda: ready_pods(bare_kube, 1), timeout=30, what="a ready pod")
    make_run(bare_kube, "job")
    bare_server.faults.add(FaultRule("conflict", frozenset({"patch"}), frozenset({"runs"}), "status", remaining=1, user_agent=USER_AGENT))
    set_run_phase(bare_kube, "job", "Scheduled", pod="python-0")
    wait_until(lambda: phase(bare_kube, "job") == "Succeeded", timeout=30, what="the run to succeed despite a conflict")
    assert client.counters.conflicts >= 1


def test_server_errors_back_off_and_are_retried(bare_server: Server, bare_server_kube: Kube, sim: ClientFactory) -> None:
    bare_kube = bare_server_kube
    bare_server.faults.error(503, "pods", subresource="status", count=3, user_agent=USER_AGENT)
    client = sim(replicas=1)
    wait_until(lambda: ready_pods(bare_kube, 1), timeout=30, what="a ready pod despite 503s")
    assert client.counters.errors >= 3


def test_runtime_objects_are_reconciled_into_pods_scaled_and_cleaned_up(bare_server: Server, bare_server_kube: Kube, sim: ClientFactory) -> None:
    bare_kube = bare_server_kube
    sim(runtimes=(), follow_runtimes=True)
    bare_server.add_runtime("go", replicas=2, capacity={"runs": "3"})
    found = wait_until(lambda: ready_pods(bare_kube, 2, "go"), timeout=30, what="2 ready pods of the Runtime")
    assert all(p["metadata"]["ownerReferences"][0]["name"] == "go" for p in found.values())
    wait_until(lambda: at(bare_kube.get("/apis/kruntimes.io/v1alpha1/namespaces/default/runtimes/go").unwrap(), "status", "readyReplicas") == 2, timeout=30, what="readyReplicas")
    bare_kube.patch("/apis/kruntimes.io/v1alpha1/namespaces/default/runtimes/go", json.dumps({"spec": {"replicas": 1}})).unwrap()
    wait_until(lambda: sorted(pods(bare_kube, "go")) == ["go-0"], timeout=30, what="the scale-down")
    bare_kube.delete("/apis/kruntimes.io/v1alpha1/namespaces/default/runtimes/go").unwrap()
    wait_until(lambda: pods(bare_kube, "go") == {}, timeout=30, what="the pods of a deleted Runtime to go")


def test_stopping_stops_writing(bare_server: Server, bare_server_kube: Kube, sim: ClientFactory) -> None:
    bare_kube = bare_server_kube
    client = sim(replicas=2, heartbeat_interval=0.05)
    wait_until(lambda: ready_pods(bare_kube, 2), timeout=30, what="2 ready pods")
    written = len(simulator_writes(bare_server))
    wait_until(lambda: len(simulator_writes(bare_server)) > written, timeout=30, what="a heartbeat written")
    client.stop()
    stopped = len(simulator_writes(bare_server))
    make_run(bare_kube, "late")
    set_run_phase(bare_kube, "late", "Scheduled", pod="python-0")  # a running client would run it at once
    time.sleep(3.0)  # three heartbeats' time at least (lastProbeTime moves once a second)
    assert simulator_writes(bare_server)[stopped:] == []


def test_the_token_bucket_gives_its_burst_then_its_rate() -> None:
    now = [100.0]
    bucket = TokenBucket(5.0, 3, clock=lambda: now[0])
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.2
    assert [bucket.try_take() for _ in range(2)] == [True, False]
    bucket.hold(1.0)
    now[0] += 0.9
    assert bucket.try_take() is False
    now[0] += 0.2
    assert bucket.try_take() is True
    bucket.stop()
    assert bucket.take() is False
