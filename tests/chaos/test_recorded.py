"""The real server's write history, made of what the fault proxies recorded (``tests/chaos/recorded.py``).

The first tests read hand-made records; the rest make the writes on the chaos tests' real control
plane and read the history a real-server epoch's checker would read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from returns.result import Failure

from kruntimes.devcluster.faults import RequestInfo
from kruntimes.kubeclient.kube import JSON_CONTENT, MERGE_PATCH, Kube, load_configuration
from kruntimes.verify.history import Write
from tests.controlplane.faultproxy import RecordedWrite

from .recorded import commit_history
from .servers import LEASES, PODS, RUNS, ChaosPlane, RealServer, path_of

MONKEY = "kruntimes-chaos/monkey"
SCHEDULER = "kruntimes-scheduler/a"


def _write(sent: int, verb: str, resource: str, obj: Mapping[str, Any], *, agent: str = MONKEY, name: str = "",
           subresource: str = "", answered: int = 200) -> RecordedWrite:
    method = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}[verb]
    info = RequestInfo(verb, "kruntimes.io" if resource == "runs" else "", resource, subresource, "default", name, agent)
    return RecordedWrite(sent, float(sent), method, info, 200, answered, obj)


def _run(version: int, phase: str = "") -> dict[str, Any]:
    return {"metadata": {"name": "r", "namespace": "default", "resourceVersion": str(version), "uid": "u"}, "status": {"phase": phase}}


def test_recorded_writes_become_the_versions_they_committed_in_commit_order_with_their_writers() -> None:
    recorded = commit_history([
        _write(3, "patch", "runs", _run(12, "Scheduled"), agent=SCHEDULER, name="r", subresource="status", answered=0),
        _write(1, "create", "runs", _run(10)),
        _write(2, "delete", "pods", {"metadata": {"name": "p", "namespace": "default", "resourceVersion": "11"}}, name="p"),
    ])
    got = [(r.resource_version, r.event_type, r.verb, r.resource.plural, r.subresource, r.name, r.user_agent) for r in recorded.history]
    assert got == [
        (10, "ADDED", "create", "runs", "", "r", MONKEY),
        (11, "DELETED", "delete", "pods", "", "p", MONKEY),
        # a write whose answer was lost committed all the same
        (12, "MODIFIED", "patch", "runs", "status", "r", SCHEDULER),
    ]


def test_a_write_answered_with_a_version_another_write_made_committed_nothing() -> None:
    committing = _write(5, "patch", "runs", _run(20, "Scheduled"), agent=SCHEDULER, name="r", subresource="status")
    noop = _write(7, "patch", "runs", _run(20, "Scheduled"), name="r")  # sent after, answered the same version
    recorded = commit_history([noop, committing])
    assert [(r.resource_version, r.user_agent) for r in recorded.history] == [(20, SCHEDULER)]
    assert recorded.noops == [noop]


def test_a_delete_answered_with_a_status_waits_for_the_watch_to_give_its_version() -> None:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": {"name": "l", "uid": "u"}}
    recorded = commit_history([_write(1, "delete", "leases", status, name="l")])
    assert recorded.history == [] and [w.info.name for w in recorded.status_deletes] == ["l"]


# --- on the real server -------------------------------------------------------------------------------


def _recorded(server: RealServer) -> list[Write]:
    history = server.history()
    assert server.audit(history) == []
    return history


def _versions(history: list[Write], plural: str, name: str) -> list[tuple[str, str, str]]:
    return [(w.event_type, w.verb, w.user_agent) for w in history if w.resource.plural == plural and w.name == name]


def _scheduler_client(server: RealServer, directory: Path) -> Kube:
    """The deploy/ ServiceAccount through the fault proxy, as a scheduler replica calls itself."""
    path = server.scheduler_kubeconfig(directory)
    return Kube(load_configuration(str(path)).unwrap().configuration, request_timeout=10, user_agent=SCHEDULER)


def test_a_status_write_whose_answer_the_proxy_lost_is_in_the_history_at_its_version(chaos_plane: ChaosPlane, tmp_path: Path) -> None:
    server = RealServer(chaos_plane, 1, 0.3, workdir=tmp_path, sharded=False)
    try:
        created = server.create(RUNS, "default", {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": "r"},
                                                  "spec": {"runtime": "python", "mode": {"task": {}}}}, MONKEY)
        assert created is not None
        server.faults.lose_response("runs", subresource="status", verbs=("patch",), count=1)
        scheduler = _scheduler_client(server, tmp_path)
        patch = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "status": {"phase": "Pending", "message": "waiting"}}
        lost = scheduler.patch_status(path_of(RUNS, "default", "r"), json.dumps(patch), MERGE_PATCH)
        scheduler.close()
        assert isinstance(lost, Failure), "the answer was lost"
        stored = server.objects(RUNS, "default", fresh=True)[0]
        history = _recorded(server)
        assert _versions(history, "runs", "r") == [("ADDED", "create", MONKEY), ("MODIFIED", "patch", SCHEDULER)]
        assert [w.object for w in history if w.resource.plural == "runs"][-1] == stored
    finally:
        server.close()


def test_a_deleted_pod_commits_twice_and_a_deleted_lease_answers_a_status_both_are_the_deleters(
    chaos_plane: ChaosPlane, tmp_path: Path
) -> None:
    """kube-apiserver marks a pod for deletion (one commit) and then deletes it (another), and
    answers a Lease's deletion with a Status: the history holds every commit, each its deleter's.
    The dev cluster deletes a pod in one commit and answers every delete with the object."""
    server = RealServer(chaos_plane, 1, 0.3, workdir=tmp_path, sharded=False)
    try:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "c", "image": "i"}], "schedulingGates": [{"name": "kruntimes.io/test"}]}}
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}}
        assert server.create(PODS, "default", pod, MONKEY) is not None
        assert server.create(LEASES, "kruntimes-system", lease, MONKEY) is not None
        gone = server.delete(LEASES, "kruntimes-system", "l", SCHEDULER)
        assert gone is not None and gone.get("kind") == "Status"
        assert server.delete(PODS, "default", "p", SCHEDULER) is not None
        history = _recorded(server)
        assert _versions(history, "leases", "l") == [("ADDED", "create", MONKEY), ("DELETED", "delete", SCHEDULER)]
        assert _versions(history, "pods", "p") == [("ADDED", "create", MONKEY), ("MODIFIED", "delete", SCHEDULER), ("DELETED", "delete", SCHEDULER)]
    finally:
        server.close()


def test_writes_that_bypassed_the_proxies_fail_the_audit(chaos_plane: ChaosPlane, tmp_path: Path) -> None:
    """One before a recorded write (the watch shows it), one after the last (the server's objects show it)."""
    server = RealServer(chaos_plane, 1, 0.3, workdir=tmp_path, sharded=False)
    try:
        def run(name: str) -> dict[str, Any]:
            return {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": name, "namespace": "default"},
                    "spec": {"runtime": "python", "mode": {"task": {}}}}

        def past_the_proxies(name: str) -> None:
            server.admin.request("POST", path_of(RUNS, "default"), body=json.dumps(run(name)).encode(), content_type=JSON_CONTENT).unwrap()

        assert server.create(RUNS, "default", run("r"), MONKEY) is not None
        past_the_proxies("early")
        assert server.merge_patch(RUNS, "default", "r", {"metadata": {"labels": {"a": "b"}}}, MONKEY) is not None
        past_the_proxies("late")
        history = server.history()
        assert [w.name for w in history if w.resource.plural == "runs"] == ["r", "r"]
        differences = server.audit(history)
        assert [d for d in differences if "'early'" in d and "watched, not recorded" in d], differences
        assert [d for d in differences if "'late'" in d and "on the server" in d], differences
        assert all("'early'" in d or "'late'" in d for d in differences), differences
    finally:
        server.close()
