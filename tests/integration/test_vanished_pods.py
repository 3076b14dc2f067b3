"""Runs on a vanished pod (SPEC §1): a pod deleted and created again under its name starts empty.

The Runs bound to the deleted pod are left as they are (their fate belongs to the
controller's stale-run reaper, not to the scheduler), and they hold nothing on the new pod.
"""

from __future__ import annotations

from datetime import timedelta

from kruntimes.kubeclient.kube import PODS, Kube
from tests.builders import make_pod, make_run

from .conftest import SchedulerFactory, Server
from .helpers import NS, assigned, at, get_run, wait_until, waiting

POD = "python-0"
FULL = 'waiting for available runtime pods for runtime "python"'


def _on(server_kube: Kube, name: str, pod_uid: str) -> bool:
    run = get_run(server_kube, name)
    return assigned(server_kube, name) == POD and at(run, "status", "assignedPodUID") == pod_uid


def test_a_pod_deleted_and_created_again_under_its_name_takes_new_runs_up_to_its_full_capacity(
    bare_server_kube: Kube, bare_server_scheduler: SchedulerFactory
) -> None:
    server_kube = bare_server_kube
    first = str(at(make_pod(server_kube, POD, "python", capacity={"runs": "2"}), "metadata", "uid"))
    # pods written by hand beat once: a window this long keeps them fresh however slow the machine
    bare_server_scheduler(heartbeat_stale_after=timedelta(minutes=30))
    for name in ("old-1", "old-2"):
        make_run(server_kube, name)
    wait_until(lambda: all(_on(server_kube, name, first) for name in ("old-1", "old-2")), timeout=30, what="the first pod filled")

    server_kube.delete(PODS.path(NS, POD)).unwrap()
    second = str(at(make_pod(server_kube, POD, "python", capacity={"runs": "2"}), "metadata", "uid"))
    assert second != first
    for name in ("new-1", "new-2"):
        make_run(server_kube, name)
    wait_until(lambda: all(_on(server_kube, name, second) for name in ("new-1", "new-2")), timeout=30, what="the new pod filled")

    make_run(server_kube, "new-3")  # the new pod is full with its own two Runs
    assert at(wait_until(lambda: waiting(server_kube, "new-3"), timeout=30, what="new-3 waiting"), "status", "message") == FULL
    assert assigned(server_kube, "new-3") is None
    for name in ("old-1", "old-2"):  # left to the controller: still Scheduled, on the pod that is gone
        run = get_run(server_kube, name)
        assert (at(run, "status", "phase"), at(run, "status", "assignedPodUID")) == ("Scheduled", first)
