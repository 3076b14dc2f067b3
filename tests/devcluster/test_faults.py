"""Fault injection, from Python and through the loopback admin endpoint: it fires as asked and changes nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
from kubernetes import client

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.faults import Faults, RequestInfo
from kruntimes.devcluster.store import Store
from kruntimes.kubeclient.kube import Kube as RawKube, load_configuration

from .helpers import GROUP, VERSION, Kube, WatchCollector, request_json, wait_until


def test_injected_conflicts_hit_the_next_n_status_writes_and_change_nothing(kube: Kube, cluster: DevCluster) -> None:
    kube.create_run("r")
    cluster.faults.conflict("runs", subresource="status", count=2)
    before = kube.run("r")
    for _ in range(2):
        with pytest.raises(client.ApiException) as refused:
            kube.patch_run_status("r", {"phase": "Running"})
        assert refused.value.status == 409
    assert kube.run("r") == before
    assert kube.patch_run_status("r", {"phase": "Running"})["status"]["phase"] == "Running"


def test_conflicts_spare_the_resources_and_verbs_they_do_not_name(kube: Kube, cluster: DevCluster) -> None:
    cluster.faults.conflict("runs", subresource="status", count=None)
    kube.create_run("r")
    kube.custom.patch_namespaced_custom_object(GROUP, VERSION, "default", "runs", "r", {"metadata": {"labels": {"a": "b"}}})
    assert kube.run("r")["metadata"]["labels"] == {"a": "b"}


def test_probabilistic_faults_replay_exactly_from_their_seed() -> None:
    def pattern(seed: int) -> list[bool]:
        faults = Faults(Store(), seed=seed)
        faults.conflict("runs", count=None, probability=0.5)
        info = RequestInfo("patch", GROUP, "runs", "status", "default", "r")
        return [faults.check(info).error is not None for _ in range(40)]

    assert pattern(7) == pattern(7)
    assert 5 < sum(pattern(7)) < 35


def test_an_injected_429_carries_retry_after(cluster: DevCluster) -> None:
    cluster.faults.error(429, "runs", retry_after=3)
    http = urllib3.PoolManager(retries=False)
    code, status, resp = request_json(http, "GET", cluster.url + "/apis/kruntimes.io/v1alpha1/namespaces/default/runs")
    assert (code, status["reason"], resp.headers["Retry-After"]) == (429, "TooManyRequests", "3")
    assert request_json(http, "GET", cluster.url + "/apis/kruntimes.io/v1alpha1/namespaces/default/runs")[0] == 200


def test_an_injected_500_is_an_internal_error_status(kube: Kube, cluster: DevCluster) -> None:
    cluster.faults.error(500, "runs", verbs=["create"])
    with pytest.raises(client.ApiException) as failed:
        kube.create_run("r")
    assert failed.value.status == 500
    assert kube.list_runs()["items"] == []


def test_injected_latency_delays_matching_requests(kube: Kube, cluster: DevCluster) -> None:
    cluster.faults.latency(0.3, "runs", verbs=["list"], count=1)
    start = time.monotonic()
    kube.list_runs()
    assert time.monotonic() - start >= 0.3


def test_dropping_watches_ends_every_open_watch(kube: Kube, cluster: DevCluster) -> None:
    watch = WatchCollector(kube.custom.list_namespaced_custom_object, GROUP, VERSION, "default", "runs", resource_version="1", timeout_seconds=30)
    wait_until(lambda: cluster.store.subscription_count == 1, what="the watch to open")
    assert cluster.faults.drop_watches("runs") == 1
    watch.join()
    assert watch.error is None


def test_the_next_watch_reconnect_can_be_answered_with_410(kube: Kube, cluster: DevCluster) -> None:
    cluster.faults.expire_next_watch("runs", count=2)
    watch = WatchCollector(kube.custom.list_namespaced_custom_object, GROUP, VERSION, "default", "runs", resource_version="1")
    watch.join()
    assert isinstance(watch.error, client.ApiException) and watch.error.status == 410


def test_the_admin_endpoint_installs_lists_and_clears_rules(cluster: DevCluster) -> None:
    http = urllib3.PoolManager(retries=False)
    admin = cluster.url + "/_devcluster/faults"
    code, added, _ = request_json(http, "POST", admin, {"action": "conflict", "resource": "runs", "subresource": "status", "count": 3})
    assert code == 200 and added["id"] >= 1
    _, listed, _ = request_json(http, "GET", admin)
    assert [(r["action"], r["remaining"], r["subresource"]) for r in listed["rules"]] == [("conflict", 3, "status")]
    request_json(http, "POST", admin, {"action": "error", "code": 429, "retryAfter": 2})
    assert len(cluster.faults.rules()) == 2
    request_json(http, "POST", admin, {"action": "clear"})
    assert cluster.faults.rules() == []
    code, status, _ = request_json(http, "POST", admin, {"action": "explode"})
    assert (code, status["reason"]) == (400, "BadRequest")


def test_the_admin_endpoint_can_drop_watches(cluster: DevCluster) -> None:
    http = urllib3.PoolManager(retries=False)
    resp = http.request("GET", cluster.url + "/apis/kruntimes.io/v1alpha1/namespaces/default/runs?watch=1", preload_content=False)
    wait_until(lambda: cluster.store.subscription_count == 1, what="the watch to open")
    _, out, _ = request_json(http, "POST", cluster.url + "/_devcluster/faults", {"action": "drop-watches"})
    assert out == {"dropped": 1}
    assert resp.read() == b""  # the stream ended with its terminating chunk
    wait_until(lambda: json.loads(http.request("GET", cluster.url + "/_devcluster/stats").data)["watches"] == 0, what="the watch to close")


# --- lose-response: the write is applied, the answer is lost ---

RUN_PATH = "/apis/kruntimes.io/v1alpha1/namespaces/default/runs/r"


@pytest.fixture
def raw_kube(cluster: DevCluster, tmp_path: Path) -> Iterator[RawKube]:
    """The scheduler's own client (no retries), to see what it sees."""
    client_ = RawKube(load_configuration(str(cluster.kubeconfig_path(tmp_path))).unwrap().configuration, request_timeout=5)
    yield client_
    client_.close()


def test_a_lost_response_applies_the_status_patch_but_the_client_sees_a_broken_connection(
    kube: Kube, cluster: DevCluster, raw_kube: RawKube
) -> None:
    created = kube.create_run("r")
    watch = WatchCollector(kube.custom.list_namespaced_custom_object, GROUP, VERSION, "default", "runs",
                           resource_version=created["metadata"]["resourceVersion"], timeout_seconds=30)
    wait_until(lambda: cluster.store.subscription_count == 1, what="the watch to open")
    cluster.faults.lose_response("runs", subresource="status", verbs=["patch"])
    answer = raw_kube.patch_status(RUN_PATH, '{"status":{"phase":"Running"}}')
    error = answer.failure()
    assert error.kind == "transport" and error.status == 0, error
    assert kube.run("r")["status"]["phase"] == "Running", "the write was committed"
    [event] = watch.wait_for(1)
    assert (event["type"], event["object"]["status"]["phase"]) == ("MODIFIED", "Running")
    watch.stop()
    [record] = [w for w in cluster.history() if w.subresource == "status"]
    assert record.verb == "patch"
    assert cluster.faults.rules() == [], "a one-shot rule is spent"
    assert raw_kube.patch_status(RUN_PATH, '{"status":{"phase":"Ready"}}').value_or(None) is not None


def test_a_lost_response_can_be_a_503_after_the_create_was_applied(kube: Kube, cluster: DevCluster, raw_kube: RawKube) -> None:
    cluster.faults.lose_response("runs", code=503, verbs=["create"])
    body = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": "r"}, "spec": {"runtime": "python", "mode": {"task": {}}}}
    answer = raw_kube.create("/apis/kruntimes.io/v1alpha1/namespaces/default/runs", body)
    assert (answer.failure().kind, answer.failure().status) == ("server", 503)
    assert kube.run("r")["spec"]["runtime"] == "python"
    again = raw_kube.create("/apis/kruntimes.io/v1alpha1/namespaces/default/runs", body)
    assert again.failure().kind == "already_exists", "the retry meets the write the client thought failed"


def test_a_write_the_server_refuses_is_answered_even_under_a_lost_response_rule(
    kube: Kube, cluster: DevCluster, raw_kube: RawKube
) -> None:
    kube.create_run("r")
    cluster.faults.lose_response("runs", subresource="status")
    stale = '{"metadata":{"resourceVersion":"1"},"status":{"phase":"Running"}}'
    assert raw_kube.patch_status(RUN_PATH, stale).failure().kind == "conflict"
    assert (kube.run("r").get("status") or {}).get("phase") != "Running", "nothing was committed"


def test_reads_are_never_hit_by_a_lost_response_rule(kube: Kube, cluster: DevCluster, raw_kube: RawKube) -> None:
    kube.create_run("r")
    cluster.faults.lose_response("runs", verbs=["get", "patch"], count=None)
    assert raw_kube.get(RUN_PATH).value_or(None) is not None


def test_the_admin_endpoint_installs_a_lost_response_rule(kube: Kube, cluster: DevCluster, raw_kube: RawKube) -> None:
    http = urllib3.PoolManager(retries=False)
    code, added, _ = request_json(http, "POST", cluster.url + "/_devcluster/faults",
                                  {"action": "lose-response", "resource": "runs", "subresource": "status", "verbs": ["patch"], "count": 2})
    assert code == 200 and added["id"] >= 1
    [rule] = cluster.faults.rules()
    assert (rule.action, rule.remaining, rule.drop_connection) == ("lose-response", 2, True)
    kube.create_run("r")
    assert raw_kube.patch_status(RUN_PATH, '{"status":{"phase":"Running"}}').failure().kind == "transport"
    assert kube.run("r")["status"]["phase"] == "Running"
    request_json(http, "POST", cluster.url + "/_devcluster/faults", {"action": "clear"})
    code, added, _ = request_json(http, "POST", cluster.url + "/_devcluster/faults",
                                  {"action": "lose-response", "resource": "runs", "code": 504})
    assert code == 200
    [rule] = cluster.faults.rules()
    assert (rule.drop_connection, rule.code) == (False, 504)
