"""The wire details clients depend on: discovery, OpenAPI, Tables, Status errors, patches, paging, namespaces."""

from __future__ import annotations

import json
import select
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import urllib3

from kruntimes.devcluster import DevCluster

from .helpers import request_json

RUNS = "/apis/kruntimes.io/v1alpha1/namespaces/default/runs"
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"


@pytest.fixture
def http() -> urllib3.PoolManager:
    return urllib3.PoolManager(retries=False)


def _run(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": name}, "spec": {"runtime": "python", "mode": {"task": {}}, **spec}}


def _create(http: urllib3.PoolManager, cluster: DevCluster, name: str, **spec: Any) -> dict[str, Any]:
    code, body, _ = request_json(http, "POST", cluster.url + RUNS, _run(name, **spec))
    assert code == 201, body
    return body


def test_discovery_lists_kruntimes_resources_with_short_names_and_status_subresources(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _, doc, _ = request_json(http, "GET", cluster.url + "/apis/kruntimes.io/v1alpha1")
    by_name = {r["name"]: r for r in doc["resources"]}
    assert by_name["runs"]["shortNames"] == ["rn"]
    assert by_name["runs"]["singularName"] == "run" and by_name["runs"]["namespaced"] is True and by_name["runs"]["kind"] == "Run"
    assert "watch" in by_name["runs"]["verbs"]
    assert by_name["runs/status"]["verbs"] == ["get", "patch", "update"]
    assert by_name["runtimes"]["shortNames"] == ["rt"]
    assert "persistentworkspaces" in by_name
    _, core, _ = request_json(http, "GET", cluster.url + "/api/v1")
    assert {"pods", "pods/status", "namespaces", "events"} <= {r["name"] for r in core["resources"]}
    _, groups, _ = request_json(http, "GET", cluster.url + "/apis")
    assert {"kruntimes.io", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"} <= {g["name"] for g in groups["groups"]}


def test_aggregated_discovery_requests_get_plain_json(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    code, doc, resp = request_json(http, "GET", cluster.url + "/apis", headers={"Accept": accept})
    assert code == 200 and doc["kind"] == "APIGroupList"
    assert resp.headers["Content-Type"] == "application/json"


def test_openapi_v3_tags_kinds_and_advertises_field_validation_on_patch(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _, index, _ = request_json(http, "GET", cluster.url + "/openapi/v3")
    url = index["paths"]["apis/kruntimes.io/v1alpha1"]["serverRelativeURL"]
    _, doc, _ = request_json(http, "GET", cluster.url + url)
    run_schema = doc["components"]["schemas"]["io.kruntimes.v1alpha1.Run"]
    assert run_schema["x-kubernetes-group-version-kind"] == [{"group": "kruntimes.io", "version": "v1alpha1", "kind": "Run"}]
    patch = doc["paths"]["/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs/{name}"]["patch"]
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    assert patch["x-kubernetes-group-version-kind"] == {"group": "kruntimes.io", "version": "v1alpha1", "kind": "Run"}
    assert "api/v1" in index["paths"]


def test_list_and_get_answer_a_table_when_kubectl_asks_for_one(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create(http, cluster, "r")
    code, tbl, _ = request_json(http, "GET", cluster.url + RUNS, headers={"Accept": TABLE_ACCEPT})
    assert code == 200 and tbl["kind"] == "Table" and tbl["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in tbl["columnDefinitions"]] == ["Name", "Phase", "Assigned Pod", "Runtime", "Age"]
    assert tbl["rows"][0]["cells"][:4] == ["r", None, None, "python"]
    assert tbl["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    _, one, _ = request_json(http, "GET", cluster.url + RUNS + "/r", headers={"Accept": TABLE_ACCEPT})
    assert one["kind"] == "Table" and len(one["rows"]) == 1
    _, plain, _ = request_json(http, "GET", cluster.url + RUNS)
    assert plain["kind"] == "RunList"


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "code", "reason"),
    [
        ("GET", RUNS + "/missing", None, "application/json", 404, "NotFound"),
        ("PUT", RUNS, {}, "application/json", 405, "MethodNotAllowed"),
        ("POST", RUNS, _run("Bad_Name"), "application/json", 422, "Invalid"),
        ("POST", RUNS, b"{not json", "application/json", 400, "BadRequest"),
        ("POST", RUNS, b"\x08\x01", "application/vnd.kubernetes.protobuf", 415, "UnsupportedMediaType"),
        ("GET", RUNS + "?labelSelector=a%20in%20b", None, "application/json", 400, "BadRequest"),
        ("GET", "/apis/kruntimes.io/v1alpha1/nothings", None, "application/json", 404, "NotFound"),
    ],
)
def test_refusals_are_status_objects_with_reason_and_code(http: urllib3.PoolManager, cluster: DevCluster, method: str, path: str, body: Any, content_type: str, code: int, reason: str) -> None:
    got, status, _ = request_json(http, method, cluster.url + path, body, content_type=content_type)
    assert (got, status["kind"], status["reason"], status["code"]) == (code, "Status", reason, code)


def test_creating_an_existing_name_is_already_exists(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create(http, cluster, "r")
    code, status, _ = request_json(http, "POST", cluster.url + RUNS, _run("r"))
    assert (code, status["reason"]) == (409, "AlreadyExists")


@pytest.mark.parametrize(
    ("content_type", "code"),
    [("application/apply-patch+yaml", 415), ("application/strategic-merge-patch+json", 415), ("application/merge-patch+json", 200)],
)
def test_custom_resources_accept_merge_and_json_patch_but_not_apply_or_strategic(http: urllib3.PoolManager, cluster: DevCluster, content_type: str, code: int) -> None:
    _create(http, cluster, "r")
    got, _, _ = request_json(http, "PATCH", cluster.url + RUNS + "/r", {"metadata": {"labels": {"a": "b"}}}, content_type=content_type)
    assert got == code


def test_json_patch_applies_operations_and_a_failed_test_is_invalid(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create(http, cluster, "r")
    ops = [
        {"op": "add", "path": "/metadata/labels", "value": {"x": "1"}},
        {"op": "replace", "path": "/metadata/labels/x", "value": "2"},
        {"op": "add", "path": "/spec/cancelRequested", "value": True},
    ]
    code, patched, _ = request_json(http, "PATCH", cluster.url + RUNS + "/r", ops, content_type="application/json-patch+json")
    assert code == 200 and patched["metadata"]["labels"] == {"x": "2"} and patched["spec"]["cancelRequested"] is True
    missing = [{"op": "replace", "path": "/spec/retryPolicy", "value": {}}]
    assert request_json(http, "PATCH", cluster.url + RUNS + "/r", missing, content_type="application/json-patch+json")[0] == 422
    code, status, _ = request_json(http, "PATCH", cluster.url + RUNS + "/r", [{"op": "test", "path": "/spec/runtime", "value": "node"}], content_type="application/json-patch+json")
    assert (code, status["reason"]) == (422, "Invalid")


def test_strategic_merge_patch_works_on_built_in_pods(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    pods = cluster.url + "/api/v1/namespaces/default/pods"
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert request_json(http, "POST", pods, pod)[0] == 201
    code, patched, _ = request_json(http, "PATCH", pods + "/p", {"metadata": {"labels": {"runtime": "python"}}}, content_type="application/strategic-merge-patch+json")
    assert code == 200 and patched["metadata"]["labels"] == {"runtime": "python"}


def test_update_without_a_resource_version_is_invalid_for_custom_resources(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create(http, cluster, "r")
    code, status, _ = request_json(http, "PUT", cluster.url + RUNS + "/r", _run("r", cancelRequested=True))
    assert (code, status["reason"]) == (422, "Invalid")


def test_resource_versions_strictly_increase_across_resources(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    versions = [int(_create(http, cluster, f"r{i}")["metadata"]["resourceVersion"]) for i in range(3)]
    _, pod, _ = request_json(http, "POST", cluster.url + "/api/v1/namespaces/default/pods", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}})
    versions.append(int(pod["metadata"]["resourceVersion"]))
    assert versions == sorted(set(versions))
    _, listed, _ = request_json(http, "GET", cluster.url + RUNS)
    assert int(listed["metadata"]["resourceVersion"]) >= versions[-1]


def test_limit_and_continue_page_through_a_list(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    for i in range(5):
        _create(http, cluster, f"r{i}")
    names: list[str] = []
    token = ""
    pages = 0
    while True:
        _, page, _ = request_json(http, "GET", cluster.url + RUNS + f"?limit=2&continue={token}")
        names += [i["metadata"]["name"] for i in page["items"]]
        pages += 1
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert names == [f"r{i}" for i in range(5)] and pages == 3


def test_pages_of_an_all_namespaces_list_show_creates_and_deletes_made_between_them(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    all_runs = "/apis/kruntimes.io/v1alpha1/runs"
    for namespace in ("a", "b"):
        assert request_json(http, "POST", cluster.url + "/api/v1/namespaces", {"metadata": {"name": namespace}})[0] == 201
        for i in (1, 3, 5):
            assert request_json(http, "POST", cluster.url + f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", _run(f"r{i}"))[0] == 201
    _, first, _ = request_json(http, "GET", cluster.url + all_runs + "?limit=2")
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in first["items"]] == [("a", "r1"), ("a", "r3")]
    # between pages: one Run created before the cursor, one after it, one after it deleted
    for namespace, name in (("a", "r0"), ("a", "r4"), ("b", "r2")):
        assert request_json(http, "POST", cluster.url + f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", _run(name))[0] == 201
    assert request_json(http, "DELETE", cluster.url + "/apis/kruntimes.io/v1alpha1/namespaces/b/runs/r3")[0] == 200
    seen: list[tuple[str, str]] = []
    token = first["metadata"]["continue"]
    while token:
        _, page, _ = request_json(http, "GET", cluster.url + all_runs + f"?limit=2&continue={token}")
        seen += [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in page["items"]]
        token = page["metadata"].get("continue", "")
    assert seen == [("a", "r4"), ("a", "r5"), ("b", "r1"), ("b", "r2"), ("b", "r5")]
    _, only_b, _ = request_json(http, "GET", cluster.url + "/apis/kruntimes.io/v1alpha1/namespaces/b/runs")
    assert [i["metadata"]["name"] for i in only_b["items"]] == ["r1", "r2", "r5"]


def test_delete_collection_removes_only_what_the_selector_matches(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create(http, cluster, "keep")
    code, _, _ = request_json(http, "POST", cluster.url + RUNS, {**_run("drop"), "metadata": {"name": "drop", "labels": {"runtime": "node"}}})
    assert code == 201
    code, _, _ = request_json(http, "DELETE", cluster.url + RUNS + "?labelSelector=runtime%3Dnode")
    assert code == 200
    _, listed, _ = request_json(http, "GET", cluster.url + RUNS)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["keep"]


def test_deleting_a_namespace_deletes_its_objects_and_then_itself(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    assert request_json(http, "POST", cluster.url + "/api/v1/namespaces", {"metadata": {"name": "tmp"}})[0] == 201
    assert request_json(http, "POST", cluster.url + "/apis/kruntimes.io/v1alpha1/namespaces/tmp/runs", _run("r"))[0] == 201
    assert request_json(http, "DELETE", cluster.url + "/api/v1/namespaces/tmp")[0] in (200, 202)
    assert request_json(http, "GET", cluster.url + "/apis/kruntimes.io/v1alpha1/namespaces/tmp/runs/r")[0] == 404
    assert request_json(http, "GET", cluster.url + "/api/v1/namespaces/tmp")[0] == 404


def test_auto_created_namespaces_when_asked_for() -> None:
    with DevCluster.start(simulator=None, auto_create_namespaces=True) as c:
        http = urllib3.PoolManager(retries=False)
        assert request_json(http, "POST", c.url + "/apis/kruntimes.io/v1alpha1/namespaces/fresh/runs", _run("r"))[0] == 201
        assert request_json(http, "GET", c.url + "/api/v1/namespaces/fresh")[0] == 200


def test_a_token_protected_cluster_answers_401_without_the_token(tmp_path: Path) -> None:
    with DevCluster.start(simulator=None, token="s3cret") as c:
        http = urllib3.PoolManager(retries=False)
        code, status, _ = request_json(http, "GET", c.url + RUNS)
        assert (code, status["reason"]) == (401, "Unauthorized")
        assert request_json(http, "GET", c.url + RUNS, headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert http.request("GET", c.url + "/healthz").status == 200
        assert c.kubeconfig()["users"][0]["user"] == {"token": "s3cret"}


def test_dry_run_validates_without_storing(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    code, _, _ = request_json(http, "POST", cluster.url + RUNS + "?dryRun=All", _run("r"))
    assert code == 201
    assert request_json(http, "GET", cluster.url + RUNS + "/r")[0] == 404


def test_watch_stream_is_chunked_newline_delimited_json(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create(http, cluster, "r")
    resp = http.request("GET", cluster.url + RUNS + "?watch=1&timeoutSeconds=1", preload_content=False)
    assert resp.headers["Transfer-Encoding"] == "chunked"
    lines = [json.loads(line) for line in resp.data.splitlines() if line.strip()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "r")]


def test_a_burst_of_clients_connecting_at_once_is_not_dropped(cluster: DevCluster) -> None:
    # A replica taking over namespaces opens a list and a watch of three kinds for each at once. A
    # listen backlog that overflows drops their SYNs, and each dropped client connects only at its
    # first SYN retransmission, a second later (the kernel's initial retransmission timeout).
    host, port = urlsplit(cluster.url).hostname or "", urlsplit(cluster.url).port or 0
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(300)]
    try:
        for sock in socks:
            sock.setblocking(False)
            sock.connect_ex((host, port))
        waiting = set(socks)
        deadline = time.monotonic() + 0.8
        while waiting and time.monotonic() < deadline:
            _, ready, _ = select.select([], list(waiting), [], max(0.0, deadline - time.monotonic()))
            for sock in ready:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                waiting.discard(sock)
        assert not waiting, f"{len(waiting)} of 300 connections still unanswered (their SYNs were dropped)"
    finally:
        for sock in socks:
            sock.close()
