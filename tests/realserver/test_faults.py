"""Faults on the real API server: the scheduler under deploy/ RBAC, its requests through the fault proxy.

The dev cluster's fault tests (tests/integration/test_faults.py) with the same rules, judged by
kube-apiserver. What the server committed is read past the proxy, as the admin.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from kruntimes.commands import replay
from kruntimes.kubeclient.kube import RUNS, Kube, load_configuration
from kruntimes.effects.runner import Scheduler, SchedulerOptions
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.server import ControlPlane
from tests.integration.helpers import at
from tests.polling import wait_until

from .support import SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT, Events, create, ready_runtime_pod, run_manifest, runs

SchedulerFactory = Callable[[], Scheduler]


@pytest.fixture
def scheduler(deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, tmp_path: Path) -> Iterator[SchedulerFactory]:
    """Start the scheduler in-process on its ServiceAccount's token, through the proxy; stopped, and its
    cycle log replayed, at teardown."""
    started: list[tuple[Scheduler, Kube]] = []

    def start() -> Scheduler:
        kubeconfig = deployed.service_account_kubeconfig(
            tmp_path / "scheduler.kubeconfig", SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT, server=fault_proxy.server
        )
        client = Kube(load_configuration(str(kubeconfig)).unwrap().configuration, request_timeout=10, user_agent="kruntimes-scheduler/faults")
        options = SchedulerOptions(
            identity="faults",
            namespaces=(namespace,),
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="127.0.0.1:0",
            heartbeat_stale_after=timedelta(minutes=10),  # nothing refreshes the pods' heartbeats here
            cycle_log=tmp_path / "cycles.jsonl",
            watch_timeout=30,
        )
        sched = Scheduler(client, options)
        sched.start()
        started.append((sched, client))
        assert sched.wait_ready(30), "scheduler did not become ready"
        assert sched.wait_leading(30), "scheduler did not start leading"
        return sched

    yield start
    for sched, client in started:
        assert sched.stop(timeout=10)
        client.close()
        log = sched.options.cycle_log
        if log is not None and log.exists() and log.stat().st_size > 0:
            assert replay.run(argparse.Namespace(file=str(log))) == 0, f"cycle log {log} does not replay identically"
    refused = [e for e in fault_proxy.history() if e.forwarded_status in (401, 403)]
    assert not refused, f"the API server refused the scheduler: {refused}"


def _status(plane: ControlPlane, namespace: str, name: str) -> dict[str, object]:
    status = runs(plane, namespace)[name].get("status")
    return status if isinstance(status, dict) else {}


def _assigned(plane: ControlPlane, namespace: str, name: str) -> str | None:
    status = _status(plane, namespace, name)
    pod = status.get("assignedPod")
    return str(pod) if pod and status.get("phase") in ("Scheduled", "Running", "Ready") else None


def test_a_409_on_bind_releases_the_reservation_and_a_later_cycle_binds(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, scheduler: SchedulerFactory
) -> None:
    ready_runtime_pod(deployed, namespace, "python-0", "python", {"runs": "1"})
    sched = scheduler()
    admin = Kube(load_configuration(str(deployed.admin_kubeconfig)).unwrap().configuration, request_timeout=10)
    committed = Events(admin.watch(RUNS.path(namespace), admin.list(RUNS.path(namespace)).unwrap()[1], timeout_seconds=300, bookmarks=False))
    try:
        fault_proxy.faults.conflict("runs", subresource="status", count=1)
        create(deployed, RUNS.path(namespace), run_manifest(namespace, "contested", "python"))
        pod = wait_until(lambda: _assigned(deployed, namespace, "contested"), timeout=30, what="bind after the conflict")
        assert pod == "python-0"
        assert sched.metrics.value("kruntimes_scheduler_reservation_conflicts_total", {"stage": "bind"}) == 1
        answered = [e.answered_status for e in fault_proxy.history()
                    if e.info is not None and e.info.subresource == "status" and e.info.name == "contested"]
        assert answered[0] == 409, "the first bind met the injected conflict"
        wait_until(lambda: len(sched.ledger.get()) == 0, what="the reservation handed off to the observation")
        create(deployed, RUNS.path(namespace), run_manifest(namespace, "second", "python"))
        wait_until(lambda: _status(deployed, namespace, "second").get("message"), timeout=30, what="second waits: the pod is full")
        assert _assigned(deployed, namespace, "second") is None
    finally:
        committed.stop()
        admin.close()
    # the released reservation held nothing back: the pod's one slot went to this Run, once
    events = []
    while not committed.queue.empty():
        events.append(committed.queue.get())
    binds = [e for e in events if at(e.object, "metadata", "name") == "contested" and at(e.object, "status", "phase") == "Scheduled"]
    assert len(binds) == 1


def test_informers_survive_a_dropped_watch_and_410_gone(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, scheduler: SchedulerFactory
) -> None:
    ready_runtime_pod(deployed, namespace, "python-0", "python", {"runs": "2"})
    sched = scheduler()
    runs_informer = next(i for i in sched.informers if i.kind == "runs")
    wait_until(lambda: fault_proxy.open_watches("runs") >= 1, what="the Run informer's watch")  # sent after the sync
    fault_proxy.faults.expire_next_watch("runs")
    assert fault_proxy.faults.drop_watches("runs") >= 1
    create(deployed, RUNS.path(namespace), run_manifest(namespace, "during-relist", "python"))
    assert wait_until(lambda: _assigned(deployed, namespace, "during-relist"), timeout=30, what="bind after 410")
    assert runs_informer.relists >= 1
