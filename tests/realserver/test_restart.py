"""A server that restarts, or comes back with less than it had, under a running scheduler.

Restarting kube-apiserver keeps etcd, so resourceVersions carry on and the scheduler's watches just
reconnect. Restoring etcd from a snapshot takes the cluster back in time: Runs created since are
gone and resourceVersions go backwards. A scheduler that kept its cache would keep counting those
Runs against their pods, and its watches, resumed from a resourceVersion the server has not
reached, would be refused (504 "Too large resource version") for as long as it retried. It must
list everything again and rebuild its reservations from what the server now holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.controlplane.server import ControlPlane
from tests.polling import wait_until

from .support import REPO, SchedulerProcess, apply_rendered, ready_runtime_pod
from .test_modes import _kubeconfig, _namespace, _phase, _run

HEARTBEAT_WINDOW = timedelta(hours=1)  # the pod's heartbeat, written once, must outlive the test


@pytest.fixture
def setting(private_plane: ControlPlane, tmp_path: Path) -> Iterator[tuple[ControlPlane, str, SchedulerProcess]]:
    plane = private_plane
    apply_rendered(plane, REPO / "deploy")
    namespace = _namespace(plane)
    ready_runtime_pod(plane, namespace, "python-0", "python", {"runs": "2"})
    process = SchedulerProcess.start(
        _kubeconfig(plane, tmp_path), tmp_path / "scheduler.log", "--leader-elect=false", "--namespace", namespace,
        "--metrics-bind-address", "0", f"--heartbeat-stale-after={int(HEARTBEAT_WINDOW.total_seconds())}s",
    )
    try:
        process.wait_ready()
        yield plane, namespace, process
    finally:
        assert process.stop() == 0, process.tail()


def test_binding_carries_on_after_kube_apiserver_restarts(setting: tuple[ControlPlane, str, SchedulerProcess]) -> None:
    plane, namespace, process = setting
    _run(plane, namespace, "before")
    wait_until(lambda: _phase(plane, namespace, "before") == "Scheduled", timeout=60, interval=0.2, what="bound before")
    plane.restart_apiserver()
    _run(plane, namespace, "after")
    wait_until(lambda: _phase(plane, namespace, "after") == "Scheduled", timeout=90, interval=0.3,
               what=f"bound after the restart; log:\n{process.tail()}")


def test_after_etcd_is_restored_from_a_snapshot_the_scheduler_forgets_runs_the_server_lost(
    setting: tuple[ControlPlane, str, SchedulerProcess], tmp_path: Path
) -> None:
    plane, namespace, process = setting
    snapshot = tmp_path / "etcd-snapshot"
    plane.save_etcd(snapshot)
    for name in ("lost-1", "lost-2"):  # fill the pod's two slots, then lose both Runs
        _run(plane, namespace, name)
    wait_until(lambda: all(_phase(plane, namespace, n) == "Scheduled" for n in ("lost-1", "lost-2")), timeout=60,
               interval=0.2, what="both slots taken")
    plane.restore_etcd(snapshot)
    assert _phase(plane, namespace, "lost-1") == "", "the restore took the Runs away"
    for name in ("new-1", "new-2"):
        _run(plane, namespace, name)
    try:
        wait_until(lambda: all(_phase(plane, namespace, n) == "Scheduled" for n in ("new-1", "new-2")), timeout=120,
                   interval=0.5, what="both slots bound again after the restore")
    except AssertionError as failed:
        raise AssertionError(f"{failed}; the scheduler's log ends:\n{process.tail()}") from None
