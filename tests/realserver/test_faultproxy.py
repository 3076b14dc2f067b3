"""The fault proxy in front of the real API server: each dev-cluster fault, as the scheduler's client sees it.

Every request here goes through ``fault_proxy`` to kube-apiserver with the caller's own token; what
the server holds is read directly from it (``deployed.request``), past the proxy.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs

import pytest
import urllib3

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.faults import RequestInfo, Verdict
from kruntimes.kubeclient.kube import RUNS, Kube, WatchEvent, load_configuration
from tests.controlplane.faultproxy import FaultProxy, request_info
from tests.controlplane.server import ADMIN_USER, ControlPlane, free_port
from tests.polling import wait_until

from .support import SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT, Events, create, run_manifest


def _client(proxy: FaultProxy, token: str, directory: Path, agent: str = "kruntimes-test/proxy") -> Kube:
    kubeconfig = proxy.kubeconfig(directory / f"proxy-{agent.replace('/', '-')}.kubeconfig", token, user=ADMIN_USER)
    return Kube(load_configuration(str(kubeconfig)).unwrap().configuration, request_timeout=10, user_agent=agent)


@pytest.fixture
def kube(deployed: ControlPlane, fault_proxy: FaultProxy, tmp_path: Path) -> Iterator[Kube]:
    """The scheduler's own client (no retries), as the admin, through the proxy."""
    client = _client(fault_proxy, deployed.admin_token, tmp_path)
    yield client
    client.close()


def _run(plane: ControlPlane, namespace: str, name: str) -> dict[str, object]:
    answer = plane.request("GET", RUNS.path(namespace, name))
    assert isinstance(answer, dict)
    return answer


def _phase(plane: ControlPlane, namespace: str, name: str) -> object:
    status = _run(plane, namespace, name).get("status")
    return status.get("phase") if isinstance(status, dict) else None


def _watch_runs(kube: Kube, namespace: str, resource_version: str) -> Events:
    return Events(kube.watch(RUNS.path(namespace), resource_version, timeout_seconds=300, bookmarks=False))


def _name(event: WatchEvent) -> object:
    metadata = event.object.get("metadata")
    return metadata.get("name") if isinstance(metadata, dict) else None


def _list_version(kube: Kube, namespace: str) -> str:
    return kube.list(RUNS.path(namespace)).unwrap()[1]


def test_an_injected_409_on_a_status_patch_never_reaches_the_server_and_the_next_patch_lands(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    create(deployed, RUNS.path(namespace), run_manifest(namespace, "r", "python"))
    before = _run(deployed, namespace, "r")
    fault_proxy.faults.conflict("runs", subresource="status", count=1)
    refused = kube.patch_status(RUNS.path(namespace, "r"), '{"status":{"phase":"Running"}}').failure()
    assert (refused.kind, refused.status, refused.reason) == ("conflict", 409, "Conflict")
    assert _run(deployed, namespace, "r") == before, "nothing changed on the server"
    kube.patch_status(RUNS.path(namespace, "r"), '{"status":{"phase":"Running"}}').unwrap()
    assert _phase(deployed, namespace, "r") == "Running"
    assert fault_proxy.faults.rules() == [], "a one-shot rule is spent"


def test_an_injected_500_refuses_a_create_and_nothing_is_created(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    fault_proxy.faults.error(500, "runs", verbs=["create"])
    refused = kube.create(RUNS.path(namespace), run_manifest(namespace, "r", "python")).failure()
    assert (refused.kind, refused.status, refused.reason) == ("server", 500, "InternalError")
    listed = deployed.request("GET", RUNS.path(namespace))
    assert isinstance(listed, dict) and listed["items"] == []


def test_an_injected_429_carries_retry_after_and_the_next_request_is_served(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    fault_proxy.faults.error(429, "runs", retry_after=3, verbs=["list"])
    throttled = kube.list(RUNS.path(namespace)).failure()
    assert (throttled.kind, throttled.status, throttled.reason, throttled.retry_after) == ("throttled", 429, "TooManyRequests", 3.0)
    assert kube.list(RUNS.path(namespace)).unwrap()[0] == ()


def test_faults_match_the_namespace_name_and_user_agent_the_server_is_asked_for(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube, tmp_path: Path
) -> None:
    for name in ("a", "b"):
        create(deployed, RUNS.path(namespace), run_manifest(namespace, name, "python"))
    fault_proxy.faults.conflict("runs", subresource="status", namespace=namespace, name="a", count=None)
    fault_proxy.faults.error(503, "runs", verbs=["get"], user_agent="kruntimes-scheduler/other", count=None)
    kube.patch_status(RUNS.path(namespace, "b"), '{"status":{"phase":"Running"}}').unwrap()
    assert kube.patch_status(RUNS.path(namespace, "a"), '{"status":{"phase":"Running"}}').failure().kind == "conflict"
    kube.get(RUNS.path(namespace, "a")).unwrap()
    other = _client(fault_proxy, deployed.admin_token, tmp_path, agent="kruntimes-scheduler/other")
    try:
        assert other.get(RUNS.path(namespace, "a")).failure().status == 503
    finally:
        other.close()


def test_injected_latency_holds_a_request_before_it_is_served(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    fault_proxy.faults.latency(1.0, "runs", verbs=["list"], count=1)
    started = time.monotonic()
    kube.list(RUNS.path(namespace)).unwrap()
    assert time.monotonic() - started >= 1.0
    assert fault_proxy.faults.rules() == []


def test_a_lost_response_lands_the_status_patch_but_the_client_sees_a_broken_connection(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    create(deployed, RUNS.path(namespace), run_manifest(namespace, "r", "python"))
    events = _watch_runs(kube, namespace, _list_version(kube, namespace))
    try:
        wait_until(lambda: fault_proxy.open_watches("runs") == 1, what="the watch to open")
        fault_proxy.faults.lose_response("runs", subresource="status", verbs=["patch"])
        lost = kube.patch_status(RUNS.path(namespace, "r"), '{"status":{"phase":"Running"}}').failure()
        assert (lost.kind, lost.status) == ("transport", 0), lost
        assert _phase(deployed, namespace, "r") == "Running", "the write landed on the server"
        event = events.next("the landed write")
        assert (event.type, event.object["status"]) == ("MODIFIED", {"phase": "Running"})
    finally:
        events.stop()
    [exchange] = [e for e in fault_proxy.history() if e.info is not None and e.info.subresource == "status"]
    assert (exchange.forwarded_status, exchange.answered_status) == (200, 0)
    kube.patch_status(RUNS.path(namespace, "r"), '{"status":{"phase":"Ready"}}').unwrap()


def test_a_lost_response_can_be_a_503_after_the_create_landed(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    fault_proxy.faults.lose_response("runs", code=503, verbs=["create"])
    body = run_manifest(namespace, "r", "python")
    lost = kube.create(RUNS.path(namespace), body).failure()
    assert (lost.kind, lost.status) == ("server", 503)
    assert _run(deployed, namespace, "r")["spec"] == {"runtime": "python", "mode": {"task": {}}}
    again = kube.create(RUNS.path(namespace), body).failure()
    assert again.kind == "already_exists", "the retry meets the write the client thought failed"


def test_a_write_the_server_refuses_is_answered_as_it_is_under_a_lost_response_rule(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    create(deployed, RUNS.path(namespace), run_manifest(namespace, "r", "python"))
    fault_proxy.faults.lose_response("runs", subresource="status")
    stale = '{"metadata":{"resourceVersion":"1"},"status":{"phase":"Running"}}'
    assert kube.patch_status(RUNS.path(namespace, "r"), stale).failure().kind == "conflict"
    assert _phase(deployed, namespace, "r") is None, "nothing was committed"


def test_an_expired_watch_is_an_error_event_of_410_and_the_next_watch_streams(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    version = _list_version(kube, namespace)
    fault_proxy.faults.expire_next_watch("runs")
    expired = _watch_runs(kube, namespace, version)
    expired.wait_ended()
    assert expired.error is not None
    assert (expired.error.error.kind, expired.error.error.status, expired.error.error.reason) == ("gone", 410, "Expired")
    events = _watch_runs(kube, namespace, version)
    try:
        create(deployed, RUNS.path(namespace), run_manifest(namespace, "r", "python"))
        assert events.next("the Run created after the expired watch").type == "ADDED"
    finally:
        events.stop()


def test_dropped_watches_end_their_streams_and_aborted_ones_break_them(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    version = _list_version(kube, namespace)
    runs = _watch_runs(kube, namespace, version)
    pods = Events(kube.watch(f"/api/v1/namespaces/{namespace}/pods", "0", timeout_seconds=300, bookmarks=False))
    try:
        wait_until(lambda: fault_proxy.open_watches() == 2, what="both watches to open")
        assert fault_proxy.faults.drop_watches("runs") == 1
        runs.wait_ended()
        assert runs.error is None, "a dropped watch ends as a watch the server closed"
        assert not pods.ended.is_set(), "a watch of another resource goes on"
        wait_until(lambda: fault_proxy.open_watches() == 1, what="the dropped watch to be gone")
        assert fault_proxy.faults.drop_watches(abort=True) == 1
        pods.wait_ended()
        assert pods.error is not None and pods.error.error.kind == "transport", "an aborted watch breaks"
    finally:
        runs.stop()
        pods.stop()
    assert kube.list(RUNS.path(namespace)).unwrap()[0] == (), "the client's next request is served"


def test_a_watch_through_the_proxy_streams_each_event_as_the_server_sends_it(
    deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy, kube: Kube
) -> None:
    """Each event must arrive while the stream is still open and before the next write exists: a
    proxy that buffered the stream would hold the first one until the watch ended, 300 s later."""
    events = _watch_runs(kube, namespace, _list_version(kube, namespace))
    try:
        for name in ("a", "b", "c"):
            create(deployed, RUNS.path(namespace), run_manifest(namespace, name, "python"))
            event = events.next(f"ADDED {name}")
            assert (event.type, _name(event)) == ("ADDED", name)
        assert not events.ended.is_set()
    finally:
        events.stop()


def test_the_proxy_adds_no_credential_the_server_judges_the_caller(
    deployed: ControlPlane, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    token = deployed.service_account_token(SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT)
    scheduler = _client(fault_proxy, token, tmp_path, agent="kruntimes-scheduler/rbac")
    anonymous = _client(fault_proxy, "", tmp_path, agent="kruntimes-test/anonymous")
    try:
        scheduler.list("/apis/kruntimes.io/v1alpha1/runs").unwrap()
        refused = scheduler.list("/api/v1/namespaces/kube-system/secrets").failure()
        assert (refused.kind, refused.status) == ("forbidden", 403), "the ServiceAccount's own RBAC applies"
        nobody = anonymous.list("/apis/kruntimes.io/v1alpha1/runs").failure()
        assert nobody.kind in ("unauthorized", "forbidden"), nobody
    finally:
        scheduler.close()
        anonymous.close()


def _sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def test_stopping_the_proxy_breaks_open_watches_and_leaves_no_socket_or_thread(
    deployed: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    sockets, threads = _sockets(), threading.active_count()
    proxy = FaultProxy.before(deployed).start()
    kube = _client(proxy, deployed.admin_token, tmp_path)
    try:
        kube.list(RUNS.path(namespace)).unwrap()
        events = _watch_runs(kube, namespace, _list_version(kube, namespace))
        wait_until(lambda: proxy.open_watches() == 1, what="the watch to open")
    finally:
        proxy.stop()
    events.wait_ended()
    assert events.error is not None and events.error.error.kind == "transport"
    kube.close()
    events.stop()
    assert proxy.history(), "the proxy served the requests"
    assert proxy.failures == []
    assert threading.active_count() == threads
    assert _sockets() == sockets, "every connection the proxy made or accepted is closed"
    late = _client(proxy, deployed.admin_token, tmp_path)
    try:
        assert late.list(RUNS.path(namespace)).failure().kind == "unreachable", "nothing listens any more"
    finally:
        late.close()


def test_a_request_the_proxy_cannot_forward_is_answered_503(deployed: ControlPlane, tmp_path: Path) -> None:
    certificate, key = deployed.proxy_credentials
    with FaultProxy(f"https://127.0.0.1:{free_port()}", deployed.ca_pem, certificate, key) as proxy:
        kube = _client(proxy, deployed.admin_token, tmp_path)
        try:
            down = kube.list("/api/v1/namespaces").failure()
        finally:
            kube.close()
    assert (down.kind, down.status, down.reason) == ("server", 503, "ServiceUnavailable")


def test_a_protocol_upgrade_is_refused_with_501(deployed: ControlPlane, namespace: str, fault_proxy: FaultProxy) -> None:
    port = int(fault_proxy.server.rsplit(":", 1)[1])
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(cadata=deployed.ca_pem.decode()), timeout=30)
    try:
        connection.request("POST", f"/api/v1/namespaces/{namespace}/pods/p/exec?command=sh",
                           headers={"Authorization": f"Bearer {deployed.admin_token}", "Connection": "Upgrade", "Upgrade": "websocket"})
        answer = connection.getresponse()
        assert (answer.status, json.loads(answer.read())["code"]) == (501, 501)
    finally:
        connection.close()


SAME_READING = [
    ("GET", "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs?labelSelector=a%3Db"),
    ("GET", "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs?watch=true&resourceVersion=0"),
    ("GET", "/apis/kruntimes.io/v1alpha1/runs?watch=1"),
    ("GET", "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/r"),
    ("POST", "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs"),
    ("PUT", "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/r/status"),
    ("PATCH", "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/r/status"),
    ("DELETE", "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/r"),
    ("DELETE", "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs"),
    ("GET", "/api/v1/pods"),
    ("PATCH", "/api/v1/namespaces/ns/pods/p/status"),
    ("POST", "/api/v1/namespaces/ns/events"),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"),
    ("GET", "/api/v1/namespaces"),
    ("GET", "/api/v1/namespaces/ns"),
    ("PUT", "/api/v1/namespaces/ns/status"),
]


def test_the_proxy_reads_each_request_as_the_dev_cluster_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule must match the same requests on either server: both read (verb, group, resource,
    subresource, namespace, name, user agent) alike."""
    seen: list[RequestInfo] = []
    with DevCluster.start(simulator=None) as cluster:
        check = cluster.faults.check

        def recording(info: RequestInfo) -> Verdict:
            seen.append(info)
            return check(info)

        monkeypatch.setattr(cluster.faults, "check", recording)
        http = urllib3.PoolManager(retries=False)
        for method, target in SAME_READING:
            answer = http.request(method, cluster.url + target, body=b"{}" if method != "GET" else None,
                                  headers={"User-Agent": "kruntimes-scheduler/a", "Content-Type": "application/merge-patch+json"},
                                  preload_content=False, timeout=10)
            answer.close()  # a watch would stream on
        http.clear()
    proxy_reading = []
    for method, target in SAME_READING:
        path, _, query = target.partition("?")
        proxy_reading.append(request_info(method, path, parse_qs(query, keep_blank_values=True), "kruntimes-scheduler/a"))
    assert proxy_reading == seen
