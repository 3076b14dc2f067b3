"""Pieces 4–7 against the project's local API server, over real HTTP with a kubeconfig.

Everything here talks to ``kruntimes.devcluster.DevCluster`` (in-process, loopback,
simulator off) through the same client the scheduler uses in a cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path

import pytest
from returns.result import Failure

from kruntimes.devcluster import DevCluster
from kruntimes.kubeclient.atom import Atom
from kruntimes.effects.binder import Binder
from kruntimes.effects.informer import Informer, watched_pods, watched_runs
from kruntimes.kubeclient.kube import RUNS, Kube, load_configuration
from kruntimes.kubeclient.leader import LeaderElectionConfig, LeaderElector
from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event
from kruntimes.pure.readers.kube import decode_run
from kruntimes.pure.model.objects import Run, RunKey
from kruntimes.pure.step import Conflict, StatusWrite, Written
from kruntimes.pure.status import bind_status
from tests.builders import make_pod, make_run

NS = "default"
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with DevCluster.start(simulator=None, bookmark_interval=0.2) as running:
        yield running


@pytest.fixture()
def kube(cluster: DevCluster, tmp_path: Path) -> Iterator[Kube]:
    path = cluster.kubeconfig_path(tmp_path)
    loaded = load_configuration(str(path)).unwrap()
    client = Kube(loaded.configuration, request_timeout=10)
    yield client
    client.close()


LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kruntimes-scheduler"


def at(obj: object, *path: str) -> object:
    """The value at ``path`` inside nested JSON objects, or ``None``."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_the_client_lists_creates_and_patches_status_with_a_kubeconfig(kube: Kube) -> None:
    created = make_run(kube, "client-r1", "py")
    items, version = kube.list(RUNS.path(NS), page_size=1).unwrap()
    assert "client-r1" in {at(item, "metadata", "name") for item in items}
    assert version
    metadata = created["metadata"]
    assert isinstance(metadata, dict)
    body = '{"metadata":{"resourceVersion":"%s"},"status":{"phase":"Pending","message":"m"}}' % metadata[
        "resourceVersion"
    ]
    assert kube.patch_status(RUNS.path(NS, "client-r1"), body).unwrap()["status"] == {"phase": "Pending", "message": "m"}
    stale = kube.patch_status(RUNS.path(NS, "client-r1"), body)
    assert isinstance(stale, Failure) and stale.failure().kind == "conflict"
    assert kube.get(RUNS.path(NS, "absent")).failure().kind == "not_found"


def test_informers_sync_then_follow_watch_events_and_ignore_unlabelled_pods(kube: Kube, cluster: DevCluster) -> None:
    make_run(kube, "inf-r1", "py")
    make_pod(kube, "inf-p1", "py", ready=False)
    state = Atom(EMPTY_STATE)
    events: list[Event] = []
    lock = threading.Lock()

    def record(old: ClusterState, new: ClusterState, event: Event) -> None:
        with lock:
            events.append(event)

    runs = Informer(kube, watched_runs(NS), state, record, watch_timeout=30)
    pods = Informer(kube, watched_pods(NS), state, record, watch_timeout=30)
    runs.start()
    pods.start()
    try:
        assert runs.wait_for_sync(10) and pods.wait_for_sync(10)
        assert state.get().run(RunKey(NS, "inf-r1")) is not None
        make_run(kube, "inf-r2", "py")
        make_pod(kube, "inf-unrelated", None, labels={"app": "web"}, ready=False)
        make_pod(kube, "inf-p2", "py", ready=False)
        assert eventually(lambda: state.get().run(RunKey(NS, "inf-r2")) is not None)
        assert eventually(lambda: state.get().pod(NS, "inf-p2") is not None)
        assert state.get().pod(NS, "inf-unrelated") is None
        with lock:
            names = {e.obj.name for e in events}
        assert "inf-unrelated" not in names
        # an expired watch makes the informer relist and carry on
        cluster.faults.expire_next_watch("runs")
        cluster.faults.drop_watches("runs")
        assert eventually(lambda: runs.relists >= 1)
        make_run(kube, "inf-r3", "py")
        assert eventually(lambda: state.get().run(RunKey(NS, "inf-r3")) is not None)
    finally:
        runs.stop()
        pods.stop()
        cluster.faults.drop_watches()


def test_the_binder_writes_scheduled_and_a_stale_version_is_a_conflict(kube: Kube) -> None:
    run = decode_run(make_run(kube, "bind-r1", "py")).unwrap()
    binder = Binder(kube)
    written = binder.write(StatusWrite(run, bind_status(run, "pod-a", "uid-a", NOW), "bind"))
    stored = kube.get(RUNS.path(NS, "bind-r1")).unwrap()
    status = stored["status"]
    assert isinstance(status, dict)
    assert (status["phase"], status["assignedPod"]) == ("Scheduled", "pod-a")
    assert isinstance(written, Written) and written.resource_version not in ("", run.resource_version)
    again = binder.write(StatusWrite(run, bind_status(run, "pod-b", "uid-b", NOW), "bind"))
    assert again == Conflict()
    read = binder.read(run.key)
    assert isinstance(read, Run) and read.resource_version == written.resource_version


def test_one_elector_leads_and_a_release_hands_over_at_once(kube: Kube) -> None:
    def elector(identity: str, log: list[str]) -> LeaderElector:
        config = LeaderElectionConfig(
            namespace="kube-system", identity=identity, lease_duration=30, renew_deadline=20, retry_period=0.05
        )
        return LeaderElector(kube, config, lambda: log.append("start"), lambda: log.append("stop"))

    log_a: list[str] = []
    log_b: list[str] = []
    a, b = elector("a", log_a), elector("b", log_b)
    assert a.try_acquire_or_renew() == "leading"
    assert b.try_acquire_or_renew() == "held_by_other"
    assert at(kube.get(LEASE).unwrap(), "spec", "holderIdentity") == "a"
    assert a.release()
    ended: list[str] = []
    thread = threading.Thread(target=lambda: ended.append(b.run()))
    thread.start()
    try:
        assert eventually(b.is_leader, timeout=5)  # far sooner than the 30 s lease duration
    finally:
        b.stop()
        thread.join(timeout=10)
    assert ended == ["stopped"]
    assert log_b == ["start", "stop"]
    assert not at(kube.get(LEASE).unwrap(), "spec", "holderIdentity")
