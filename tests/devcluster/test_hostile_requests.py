"""Hostile or malformed requests get kube-apiserver's answers: a 4xx Status, fast, and nothing stored.

Bodies are bounded as the real server bounds them (3 MiB, go-yaml's alias rule, numbers JSON and
float64 can hold); query parameters are parsed as apimachinery parses them (a malformed one is a
400, a refused option a 422); a bug is a 500 Status, logged with the request, never a traceback
in the answer and never a second answer inside a watch stream.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.http import _WatchEncoder

from .helpers import request_json

PODS = "/api/v1/namespaces/default/pods"
MIB = 1024 * 1024
TIMEOUT = urllib3.Timeout(total=20)
"""Generous: a request the server handles hangs no more than this before the test fails."""


@pytest.fixture
def http() -> urllib3.PoolManager:
    return urllib3.PoolManager(retries=False, timeout=TIMEOUT)


def _strict_json(data: bytes) -> Any:
    """Parse as Go's encoding/json would: NaN and Infinity are not JSON."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")
    return json.loads(data, parse_constant=refuse)


def _pod_names(http: urllib3.PoolManager, cluster: DevCluster) -> list[str]:
    resp = http.request("GET", cluster.url + PODS)
    assert resp.status == 200, resp.data[:300]
    return [item["metadata"]["name"] for item in _strict_json(resp.data)["items"]]


def _create_pod(http: urllib3.PoolManager, cluster: DevCluster, name: str, **spec: Any) -> dict[str, Any]:
    code, body, _ = request_json(http, "POST", cluster.url + PODS, {"metadata": {"name": name}, "spec": spec})
    assert code == 201, body
    return body


def _assert_status(code: int, body: dict[str, Any], expected: int, reason: str) -> None:
    assert (code, body.get("kind"), body.get("code"), body.get("reason")) == (expected, "Status", expected, reason), body
    assert "Traceback" not in body["message"]


def laughs(levels: int, fanout: int) -> str:
    """A pod whose spec is the billion-laughs document: each level lists the one below ``fanout`` times."""
    lines = ["metadata: {name: laughs}", "spec:", "  l0: &l0 [" + ", ".join(["lol"] * fanout) + "]"]
    for level in range(1, levels):
        lines.append(f"  l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * fanout) + "]")
    return "\n".join(lines) + "\n"


# -- bodies -----------------------------------------------------------------------------------


def test_yaml_aliases_expand_as_go_yaml_allows_and_a_bomb_is_refused_unexpanded(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    modest = laughs(levels=3, fanout=10)  # go-yaml decodes this one: 1,110 scalars, 99% of them from aliases
    code, body, _ = request_json(http, "POST", cluster.url + PODS, modest, content_type="application/yaml")
    assert code == 201, body
    assert body["spec"]["l2"] == [[["lol"] * 10] * 10] * 10
    http.request("DELETE", cluster.url + PODS + "/laughs")
    bomb = laughs(levels=6, fanout=10)  # a million scalars from 300 bytes
    code, body, _ = request_json(http, "POST", cluster.url + PODS, bomb, content_type="application/yaml")
    _assert_status(code, body, 400, "BadRequest")
    assert body["message"] == "invalid YAML in request body: yaml: document contains excessive aliasing"
    code, body, _ = request_json(http, "POST", cluster.url + PODS, "metadata: {name: loop}\nspec: &s {again: *s}\n", content_type="application/yaml")
    _assert_status(code, body, 400, "BadRequest")
    assert "anchor value contains itself" in body["message"]
    assert _pod_names(http, cluster) == []


@pytest.mark.parametrize(
    ("content_type", "number"),
    [
        ("application/json", "NaN"),
        ("application/json", "Infinity"),
        ("application/json", "-Infinity"),
        ("application/json", "1e999"),
        ("application/yaml", ".nan"),
        ("application/yaml", "-.inf"),
        ("application/yaml", "1.0e+999"),
    ],
)
def test_a_number_json_cannot_hold_is_refused_so_every_list_stays_valid_json(http: urllib3.PoolManager, cluster: DevCluster, content_type: str, number: str) -> None:
    body = '{"metadata": {"name": "p"}, "spec": {"x": ' + number + "}}"  # JSON, and YAML's flow style
    code, answer, _ = request_json(http, "POST", cluster.url + PODS, body, content_type=content_type)
    _assert_status(code, answer, 400, "BadRequest")
    assert _pod_names(http, cluster) == []


def test_integers_beyond_int64_become_float64_as_kube_apiserver_decodes_them(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    body = '{"metadata": {"name": "p"}, "spec": {"big": 123456789012345678901234, "edge": 9223372036854775807, "low": -9223372036854775808}}'
    code, pod, _ = request_json(http, "POST", cluster.url + PODS, body)
    assert code == 201, pod
    assert pod["spec"] == {"big": 1.2345678901234568e23, "edge": 9223372036854775807, "low": -9223372036854775808}
    assert isinstance(pod["spec"]["big"], float)


def test_an_integer_of_thousands_of_digits_is_a_400_in_json_and_yaml(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    digits = "9" * 5000
    for content_type in ("application/json", "application/yaml"):
        code, body, _ = request_json(http, "POST", cluster.url + PODS, '{"metadata": {"name": "p"}, "spec": {"x": ' + digits + "}}", content_type=content_type)
        _assert_status(code, body, 400, "BadRequest")
        assert len(body["message"]) < 400
    assert _pod_names(http, cluster) == []


def test_yaml_timestamps_binary_sets_and_number_keys_are_stored_as_the_json_they_convert_to(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    body = "metadata: {name: p, labels: {day: 2001-12-14}}\nspec: {blob: !!binary aGVsbG8=, tags: !!set {a, b}, 2: two, true: yes}\n"
    code, pod, _ = request_json(http, "POST", cluster.url + PODS, body, content_type="application/yaml")
    assert code == 201, pod
    assert pod["metadata"]["labels"] == {"day": "2001-12-14"}
    assert pod["spec"] == {"blob": "hello", "tags": {"a": None, "b": None}, "2": "two", "true": True}
    assert _pod_names(http, cluster) == ["p"]


def test_a_body_over_3_mib_is_a_413_whether_sized_or_chunked(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    def pod(name: str, size: int) -> bytes:
        head = json.dumps({"metadata": {"name": name}, "spec": {"pad": ""}}).encode()
        return head[:-3] + b"x" * (size - len(head)) + head[-3:]

    fits = pod("fits", 3 * MIB)
    assert len(fits) == 3 * MIB
    assert http.request("POST", cluster.url + PODS, body=fits, headers={"Content-Type": "application/json"}).status == 201
    over = pod("over", 3 * MIB + 1)
    code, body, _ = request_json(http, "POST", cluster.url + PODS, over)
    _assert_status(code, body, 413, "RequestEntityTooLarge")
    assert body["message"] == "Request entity too large: limit is 3145728"

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(over), 64 * 1024):
            yield over[i : i + 64 * 1024]

    resp = http.request("POST", cluster.url + PODS, body=chunks(), chunked=True, headers={"Content-Type": "application/json"})
    assert resp.status == 413, resp.data[:300]
    assert _pod_names(http, cluster) == ["fits"]


# -- query parameters ---------------------------------------------------------------------------


_INFINITE_CONTINUE = base64.urlsafe_b64encode(b'{"rv": Infinity, "start": ["", "x"]}').decode()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", PODS + "?limit=abc"),
        ("GET", PODS + "?limit=1.5"),
        ("GET", PODS + "?limit=99999999999999999999"),
        ("GET", PODS + "?watch=true&timeoutSeconds=nan"),
        ("GET", PODS + "?watch=true&timeoutSeconds=1e3"),
        ("GET", PODS + "?watch=true&timeoutSeconds=-99999999999999999999"),
        ("GET", PODS + "?continue=" + _INFINITE_CONTINUE),
        ("DELETE", PODS + "/p?gracePeriodSeconds=soon"),
        ("GET", "/_devcluster/history?since=abc"),
    ],
)
def test_a_malformed_query_parameter_is_a_400_status_not_a_500_or_an_endless_watch(http: urllib3.PoolManager, cluster: DevCluster, method: str, path: str) -> None:
    _create_pod(http, cluster, "p")
    code, body, _ = request_json(http, method, cluster.url + path)
    _assert_status(code, body, 400, "BadRequest")
    assert _pod_names(http, cluster) == ["p"]


def test_include_object_of_a_table_must_be_none_metadata_or_object(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    code, body, _ = request_json(http, "GET", cluster.url + PODS + "?includeObject=Everything", headers={"Accept": accept})
    _assert_status(code, body, 400, "BadRequest")
    assert body["message"] == 'unrecognized includeObject value: "Everything"'


def test_a_watch_with_timeout_seconds_zero_lasts_the_servers_default(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    resp = http.request("GET", cluster.url + PODS + "?watch=true&timeoutSeconds=0", preload_content=False)
    try:
        assert resp.status == 200
        _create_pod(http, cluster, "late")
        first = next(resp.read_chunked())
        event = json.loads(first.splitlines()[0])
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "late")
    finally:
        resp.release_conn()
        resp.close()


@pytest.mark.parametrize(("value", "watches"), [("t", True), ("", True), ("1", True), ("0", False), ("FALSE", False)])
def test_a_query_flag_is_true_unless_absent_zero_or_false(http: urllib3.PoolManager, cluster: DevCluster, value: str, watches: bool) -> None:
    _create_pod(http, cluster, "p")
    resp = http.request("GET", cluster.url + PODS + f"?watch={value}&timeoutSeconds=1")
    first = json.loads(resp.data.splitlines()[0])
    if watches:
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "p")
    else:
        assert first["kind"] == "PodList"


def test_an_unknown_dry_run_value_is_a_422_and_writes_nothing(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    code, body, _ = request_json(http, "POST", cluster.url + PODS + "?dryRun=all", {"metadata": {"name": "p"}})
    _assert_status(code, body, 422, "Invalid")
    assert body["message"] == 'CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"all"}: supported values: "All"'
    assert body["details"]["causes"] == [{"reason": "FieldValueNotSupported", "field": "dryRun", "message": 'Unsupported value: []string{"all"}: supported values: "All"'}]
    assert _pod_names(http, cluster) == []


def test_field_validation_and_field_manager_are_checked_as_kube_apiserver_checks_them(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    code, body, _ = request_json(http, "POST", cluster.url + PODS + "?fieldValidation=strict", {"metadata": {"name": "p"}})
    _assert_status(code, body, 422, "Invalid")
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [("fieldValidation", "FieldValueNotSupported")]
    _create_pod(http, cluster, "p")
    code, body, _ = request_json(http, "PATCH", cluster.url + PODS + "/p?fieldManager=" + "m" * 129, {"metadata": {"labels": {"a": "b"}}}, content_type="application/merge-patch+json")
    _assert_status(code, body, 422, "Invalid")
    assert body["details"]["kind"] == "PatchOptions"
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [("fieldManager", "FieldValueTooLong")]
    assert "labels" not in _strict_json(http.request("GET", cluster.url + PODS + "/p").data)["metadata"]


def test_a_dry_run_delete_of_a_collection_deletes_nothing(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create_pod(http, cluster, "a")
    _create_pod(http, cluster, "b")
    code, body, _ = request_json(http, "DELETE", cluster.url + PODS + "?dryRun=All")
    assert code == 200 and [i["metadata"]["name"] for i in body["items"]] == ["a", "b"]
    assert _pod_names(http, cluster) == ["a", "b"]


def test_delete_options_of_the_wrong_shape_are_a_400_and_an_unknown_policy_a_422(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create_pod(http, cluster, "p")
    for options in ({"dryRun": 5}, {"preconditions": ["uid"]}, {"gracePeriodSeconds": "soon"}, [1]):
        code, body, _ = request_json(http, "DELETE", cluster.url + PODS + "/p", options)
        _assert_status(code, body, 400, "BadRequest")
    code, body, _ = request_json(http, "DELETE", cluster.url + PODS + "/p?propagationPolicy=Sideways")
    _assert_status(code, body, 422, "Invalid")
    assert body["details"]["kind"] == "DeleteOptions" and body["details"]["causes"][0]["field"] == "propagationPolicy"
    assert _pod_names(http, cluster) == ["p"]


# -- patches --------------------------------------------------------------------------------


def _json_patch(http: urllib3.PoolManager, cluster: DevCluster, name: str, operations: Any) -> tuple[int, dict[str, Any]]:
    code, body, _ = request_json(http, "PATCH", cluster.url + PODS + "/" + name, operations, content_type="application/json-patch+json")
    return code, body


def test_a_json_patch_has_at_most_10000_operations(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create_pod(http, cluster, "p", n=0)
    code, body = _json_patch(http, cluster, "p", [{"op": "replace", "path": "/spec/n", "value": i} for i in range(10_001)])
    _assert_status(code, body, 413, "RequestEntityTooLarge")
    assert body["message"] == "The allowed maximum operations in a JSON patch is 10000, got 10001"
    code, body = _json_patch(http, cluster, "p", [{"op": "replace", "path": "/spec/n", "value": i} for i in range(10_000)])
    assert code == 200 and body["spec"]["n"] == 9_999


def test_json_patch_copies_may_add_at_most_3_mib(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    _create_pod(http, cluster, "p", pad="x" * 200_000)
    copies = [{"op": "copy", "from": "/spec/pad", "path": f"/spec/c{i}"} for i in range(20)]  # 4 MB of copies from a 200 KB body
    code, body = _json_patch(http, cluster, "p", copies)
    _assert_status(code, body, 422, "Invalid")
    assert "accumulated size increase of copy" in body["message"]
    assert set(_strict_json(http.request("GET", cluster.url + PODS + "/p").data)["spec"]) == {"pad"}


@pytest.mark.parametrize("index", ["\u00b2", "\u0663", "9" * 5000])
def test_a_json_patch_index_that_is_not_ascii_digits_is_a_422(http: urllib3.PoolManager, cluster: DevCluster, index: str) -> None:
    _create_pod(http, cluster, "p", items=[1, 2, 3])
    for op in ({"op": "add", "path": f"/spec/items/{index}", "value": 0}, {"op": "remove", "path": f"/spec/items/{index}"}, {"op": "test", "path": f"/spec/items/{index}", "value": 1}):
        code, body = _json_patch(http, cluster, "p", [op])
        _assert_status(code, body, 422, "Invalid")


# -- protobuf ---------------------------------------------------------------------------------

PROTOBUF = "application/vnd.kubernetes.protobuf"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return b"k8s\x00" + _field(1, _field(1, api_version) + _field(2, kind)) + _field(2, raw)


def _namespace(name: str, labels: dict[str, str], annotations: dict[str, str]) -> bytes:
    meta = _field(1, name) + _field(2, "") + _field(8, b"")  # as client-go writes them: empty fields included
    meta += b"".join(_field(11, _field(1, k) + _field(2, v)) for k, v in labels.items())
    meta += b"".join(_field(12, _field(1, k) + _field(2, v)) for k, v in annotations.items())
    return _envelope("v1", "Namespace", _field(1, meta) + _field(2, b"") + _field(3, b""))


def test_a_protobuf_namespace_is_created_with_its_labels_and_annotations(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    body = _namespace("team-y", {"team": "y"}, {"owner": "ops@example.com"})
    resp = http.request("POST", cluster.url + "/api/v1/namespaces", body=body, headers={"Content-Type": PROTOBUF, "Accept": PROTOBUF + ",application/json"})
    assert resp.status == 201, resp.data[:300]
    created = json.loads(resp.data)
    assert created["metadata"]["name"] == "team-y" and created["status"]["phase"] == "Active"
    assert created["metadata"]["labels"] == {"team": "y"} and created["metadata"]["annotations"] == {"owner": "ops@example.com"}


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{}",
        b"k8s\x00\x0a\xff",  # a length past the end
        b"k8s\x00\x0b",  # wire type 3, a group
        b"k8s\x00" + b"\x80" * 11,  # a varint longer than 10 bytes
        _envelope("v1", "Pod", b""),  # a Pod sent to the namespaces
    ],
)
def test_a_malformed_protobuf_namespace_is_a_400(http: urllib3.PoolManager, cluster: DevCluster, body: bytes) -> None:
    resp = http.request("POST", cluster.url + "/api/v1/namespaces", body=body, headers={"Content-Type": PROTOBUF})
    answer = json.loads(resp.data)
    _assert_status(resp.status, answer, 400, "BadRequest")


def test_protobuf_for_any_other_kind_is_a_415_that_asks_for_json(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    body = _envelope("v1", "Pod", _field(1, _field(1, "p")))
    resp = http.request("POST", cluster.url + PODS, body=body, headers={"Content-Type": PROTOBUF})
    answer = json.loads(resp.data)
    _assert_status(resp.status, answer, 415, "UnsupportedMediaType")
    assert "application/json" in answer["message"] and "protobuf only for namespaces" in answer["message"]


# -- bugs -----------------------------------------------------------------------------------


def test_an_unexpected_failure_is_a_500_status_logged_with_its_request(http: urllib3.PoolManager, cluster: DevCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the store is on fire")

    monkeypatch.setattr(cluster.service, "list", broken)
    code, body, resp = request_json(http, "GET", cluster.url + PODS)
    _assert_status(code, body, 500, "InternalError")
    assert body["message"] == "Internal error occurred: RuntimeError: the store is on fire"
    log = capsys.readouterr().err
    assert f"request {resp.headers['Audit-Id']} (GET {PODS}) failed" in log
    assert "Traceback" in log and "the store is on fire" in log


def test_a_watch_that_fails_after_its_headers_is_cut_not_followed_by_a_second_answer(http: urllib3.PoolManager, cluster: DevCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(self: _WatchEncoder, item: Any) -> bytes:
        raise RuntimeError("cannot encode")

    monkeypatch.setattr(_WatchEncoder, "encode", broken)
    host, port = cluster.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(f"GET {PODS}?watch=true HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        received = sock.recv(65536)
        assert received.startswith(b"HTTP/1.1 200")
        _create_pod(http, cluster, "p")
        while chunk := sock.recv(65536):
            received += chunk
    assert received.count(b"HTTP/1.1") == 1, received
    assert "Traceback" in capsys.readouterr().err
