"""The official kubernetes Python client against the dev cluster: watches, conflicts, subresources, selectors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kruntimes.devcluster import DevCluster

from .helpers import GROUP, VERSION, Kube, WatchCollector, as_obj, close_api, kube_for


@pytest.fixture
def kube(server_kube: Kube) -> Kube:
    """Every test here runs on the dev cluster and on the real kube-apiserver."""
    return server_kube


def _rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def test_watch_from_a_lists_resource_version_sees_every_later_change_once_and_in_order(kube: Kube) -> None:
    for name in ("a", "b", "c"):
        kube.create_run(name)
    listed = kube.list_runs()
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a", "b", "c"]
    watch = WatchCollector(kube.custom.list_namespaced_custom_object, GROUP, VERSION, "default", "runs", resource_version=listed["metadata"]["resourceVersion"])
    try:
        expected: list[tuple[str, str, int]] = []
        for i in range(5):
            expected.append(("MODIFIED", "a", _rv(kube.patch_run_status("a", {"message": f"step {i}"}))))
        expected.append(("ADDED", "d", _rv(kube.create_run("d"))))
        expected.append(("MODIFIED", "b", _rv(kube.patch_run_status("b", {"phase": "Scheduled", "assignedPod": "p-0"}))))
        # an immediate delete answers with a Status, not the object: its version comes with the event
        deleted = as_obj(kube.custom.delete_namespaced_custom_object(GROUP, VERSION, "default", "runs", "c"))
        assert (deleted["kind"], deleted["status"], deleted["details"]["name"]) == ("Status", "Success", "c")
        events = watch.wait_for(len(expected) + 1)
        seen = [(e["type"], e["object"]["metadata"]["name"], _rv(e["object"])) for e in events]
        assert seen[:-1] == expected
        assert seen[-1][:2] == ("DELETED", "c")
        assert [rv for *_, rv in seen] == sorted({rv for *_, rv in seen})
    finally:
        watch.stop()


def test_watch_without_resource_version_starts_with_the_current_state_as_added(kube: Kube) -> None:
    kube.create_run("x")
    kube.create_run("y")
    watch = WatchCollector(kube.custom.list_namespaced_custom_object, GROUP, VERSION, "default", "runs")
    try:
        events = watch.wait_for(2)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "x"), ("ADDED", "y")]
    finally:
        watch.stop()


def test_status_write_with_a_stale_resource_version_gets_409_and_changes_nothing(kube: Kube) -> None:
    run = kube.create_run("r")
    stale = run["metadata"]["resourceVersion"]
    current = kube.patch_run_status("r", {"phase": "Scheduled", "assignedPod": "p-0"}, resource_version=stale)
    with pytest.raises(client.ApiException) as refused:
        kube.patch_run_status("r", {"phase": "Failed"}, resource_version=stale)
    assert refused.value.status == 409
    assert '"reason":"Conflict"' in (refused.value.body or "").replace(" ", "")
    assert kube.run("r") == current


def test_replace_status_with_a_stale_resource_version_gets_409(kube: Kube) -> None:
    run = kube.create_run("r")
    kube.patch_run_status("r", {"phase": "Scheduled"})
    with pytest.raises(client.ApiException) as refused:
        kube.custom.replace_namespaced_custom_object_status(GROUP, VERSION, "default", "runs", "r", {**run, "status": {"phase": "Running"}})
    assert refused.value.status == 409
    assert kube.run("r")["status"] == {"phase": "Scheduled"}


@pytest.fixture
def short_memory(tmp_path: Path) -> Iterator[tuple[DevCluster, Kube]]:
    with DevCluster.start(simulator=None, event_window=5) as c:
        k = kube_for(c.kubeconfig_path(tmp_path))
        yield c, k
        close_api(k.api)


def test_watch_from_a_resource_version_older_than_the_history_window_gets_410(short_memory: tuple[DevCluster, Kube]) -> None:
    _, kube = short_memory
    old = kube.create_run("r")["metadata"]["resourceVersion"]
    for i in range(10):
        kube.patch_run_status("r", {"message": str(i)})
    watch = WatchCollector(kube.custom.list_namespaced_custom_object, GROUP, VERSION, "default", "runs", resource_version=old)
    watch.join()
    assert isinstance(watch.error, client.ApiException)
    assert watch.error.status == 410
    assert "Expired" in str(watch.error.reason)


def test_status_subresource_isolates_status_from_spec_in_both_directions(kube: Kube) -> None:
    kube.create_run("r", cancelRequested=False)
    patched = as_obj(kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runs", "r", {"spec": {"cancelRequested": True}, "status": {"phase": "Running"}}))
    assert patched["spec"]["cancelRequested"] is True
    assert "status" not in patched
    status_write = kube.patch_run_status("r", {"phase": "Scheduled"})
    assert status_write["status"] == {"phase": "Scheduled"}
    body = {**status_write, "spec": {"runtime": "python", "mode": {"task": {}}, "cancelRequested": False}, "status": {"phase": "Running"}}
    replaced = as_obj(kube.custom.replace_namespaced_custom_object_status(GROUP, VERSION, "default", "runs", "r", body))
    assert replaced["spec"]["cancelRequested"] is True
    assert replaced["status"] == {"phase": "Running"}


def test_create_ignores_status_for_kinds_with_a_status_subresource(kube: Kube) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Run", "metadata": {"name": "r"}, "spec": {"runtime": "python", "mode": {"task": {}}}, "status": {"phase": "Running"}}
    created = as_obj(kube.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "runs", body))
    assert "status" not in created


def test_label_selectors_follow_the_kubernetes_grammar(kube: Kube) -> None:
    kube.create_run("gold", labels={"tier": "gold", "zone": "blue"})
    kube.create_run("silver", labels={"tier": "silver"})
    kube.create_run("plain")

    def names(selector: str) -> list[str]:
        return [i["metadata"]["name"] for i in kube.list_runs(label_selector=selector)["items"]]

    assert names("tier=gold") == ["gold"]
    assert names("tier==gold") == ["gold"]
    assert names("tier!=gold") == ["plain", "silver"]
    assert names("tier in (gold, silver)") == ["gold", "silver"]
    assert names("tier notin (gold)") == ["plain", "silver"]
    assert names("tier") == ["gold", "silver"]
    assert names("!tier") == ["plain"]
    assert names("tier,zone=blue") == ["gold"]
    with pytest.raises(client.ApiException) as bad:
        names("tier in gold")
    assert bad.value.status == 400


def test_field_selectors_cover_name_and_namespace_and_only_what_the_crd_declares(kube: Kube) -> None:
    kube.create_run("a", runtime="python")
    kube.create_run("b", runtime="node")
    kube.patch_run_status("b", {"phase": "Running"})

    def names(selector: str) -> list[str]:
        return [i["metadata"]["name"] for i in kube.list_runs(field_selector=selector)["items"]]

    assert names("metadata.name=b,metadata.namespace=default") == ["b"]
    assert names("metadata.name!=b") == ["a"]
    # deploy/crds declares no selectableFields, so a real server refuses these too
    for selector in ("spec.runtime=python", "status.phase=Running", "spec.resources=1"):
        with pytest.raises(client.ApiException) as bad:
            names(selector)
        assert bad.value.status == 400


def test_generate_name_gives_each_create_a_fresh_unique_name(kube: Kube) -> None:
    names = {kube.create_run("job-", generate=True)["metadata"]["name"] for _ in range(20)}
    assert len(names) == 20
    assert all(n.startswith("job-") and len(n) == len("job-") + 5 for n in names)


def test_a_finalizer_delays_deletion_until_the_last_one_is_removed(kube: Kube) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Run", "metadata": {"name": "r", "finalizers": ["a/x", "b/y"]}, "spec": {"runtime": "python", "mode": {"task": {}}}}
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, "default", "runs", body)
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, "default", "runs", "r")
    terminating = kube.run("r")
    assert terminating["metadata"]["deletionTimestamp"]
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runs", "r", {"metadata": {"finalizers": ["b/y"]}})
    assert kube.run("r")["metadata"]["finalizers"] == ["b/y"]
    with pytest.raises(client.ApiException) as refused:
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runs", "r", {"metadata": {"finalizers": ["b/y", "c/z"]}})
    assert refused.value.status == 422
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runs", "r", {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as gone:
        kube.run("r")
    assert gone.value.status == 404


def test_generation_starts_at_one_and_moves_only_when_the_spec_changes(kube: Kube) -> None:
    assert kube.create_run("r")["metadata"]["generation"] == 1

    def patch(body: dict[str, Any]) -> int:
        out = as_obj(kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runs", "r", body))
        return int(out["metadata"]["generation"])

    assert patch({"metadata": {"labels": {"a": "b"}}}) == 1
    assert kube.patch_run_status("r", {"phase": "Running"})["metadata"]["generation"] == 1
    assert patch({"spec": {"cancelRequested": True}}) == 2
    assert patch({"spec": {"cancelRequested": True}}) == 2


def test_a_no_op_write_keeps_the_resource_version(kube: Kube) -> None:
    run = kube.patch_run_status(kube.create_run("r")["metadata"]["name"], {"phase": "Running"})
    again = kube.patch_run_status("r", {"phase": "Running"})
    assert again["metadata"]["resourceVersion"] == run["metadata"]["resourceVersion"]


def test_immutable_run_spec_fields_refuse_a_change(kube: Kube) -> None:
    kube.create_run("r", runtime="python")
    with pytest.raises(client.ApiException) as refused:
        kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runs", "r", {"spec": {"runtime": "node"}})
    assert refused.value.status == 422
    assert "runtime, source, mode, env, timeout, retryPolicy, and resources are immutable after Run creation" in (refused.value.body or "")


def test_fields_the_schema_does_not_declare_are_pruned_with_a_warning(kube: Kube) -> None:
    created = kube.create_run("r", resources={"requests": {"runs": 1}, "bogus": True})
    assert created["spec"]["resources"] == {"requests": {"runs": 1}}


def test_core_pods_round_trip_through_typed_models_and_status(kube: Kube) -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", labels={"runtime": "python"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
    )
    created = kube.core.create_namespaced_pod("default", pod)
    assert created.status is not None and created.status.phase == "Pending"
    assert created.metadata is not None and created.metadata.uid
    created.status = client.V1PodStatus(phase="Running", conditions=[client.V1PodCondition(type="Ready", status="True")])
    kube.core.replace_namespaced_pod_status("p", "default", created)
    pods = kube.core.list_namespaced_pod("default", label_selector="runtime=python", field_selector="status.phase=Running")
    assert [p.metadata.name for p in pods.items if p.metadata is not None] == ["p"]


def test_leases_and_events_are_served(kube: Kube) -> None:
    coordination = client.CoordinationV1Api(kube.api)
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="kruntimes-scheduler"), spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15))
    created = coordination.create_namespaced_lease("kube-system", lease)
    assert created.spec is not None and created.spec.holder_identity == "a"
    created.spec.holder_identity = "b"
    assert coordination.replace_namespaced_lease("kruntimes-scheduler", "kube-system", created).spec is not None
    created.spec.holder_identity = "c"  # still carries the old resourceVersion
    with pytest.raises(client.ApiException) as refused:
        coordination.replace_namespaced_lease("kruntimes-scheduler", "kube-system", created)
    assert refused.value.status == 409
    event = client.CoreV1Event(metadata=client.V1ObjectMeta(generate_name="r."), involved_object=client.V1ObjectReference(kind="Run", name="r"), reason="Scheduled", message="bound", type="Normal")
    kube.core.create_namespaced_event("default", event)
    events = kube.core.list_namespaced_event("default", field_selector="involvedObject.name=r")
    assert [e.reason for e in events.items] == ["Scheduled"]


def test_cluster_wide_list_spans_namespaces(kube: Kube) -> None:
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="team-a")))
    kube.create_run("r1")
    kube.create_run("r2", namespace="team-a")
    listed = as_obj(kube.custom.list_cluster_custom_object(GROUP, VERSION, "runs"))
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]] == [("default", "r1"), ("team-a", "r2")]


def test_creating_in_a_missing_namespace_is_not_found(kube: Kube) -> None:
    with pytest.raises(client.ApiException) as refused:
        kube.create_run("r", namespace="nowhere")
    assert refused.value.status == 404
