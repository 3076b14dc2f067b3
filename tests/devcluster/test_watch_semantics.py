"""Watch and history semantics, observed over HTTP and through the store's Python API."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import pytest
import urllib3

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.selectors import Selection, parse_selection
from kruntimes.devcluster.store import Bookmark, Delivery, Keep, Put, Store, WriteContext
from kruntimes.devcluster.types import GroupResource, ObjectKey

from .conftest import Api
from .helpers import request_json, wait_until

RUNS = "/apis/kruntimes.io/v1alpha1/namespaces/default/runs"


class StreamReader:
    """Reads a raw watch response line by line on a thread."""

    def __init__(self, http: urllib3.PoolManager, url: str) -> None:
        self.resp = http.request("GET", url, preload_content=False)
        self.events: list[dict[str, Any]] = []
        self.arrived: list[float] = []
        """When each event was read (``time.monotonic``)."""
        self.ended = threading.Event()
        self.ended_at = 0.0
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buffer = b""
        try:
            for chunk in self.resp.stream(None):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self.arrived.append(time.monotonic())
                        self.events.append(json.loads(line))
        except (urllib3.exceptions.ProtocolError, OSError):
            pass
        self.ended_at = time.monotonic()
        self.ended.set()

    def wait_for(self, count: int) -> list[dict[str, Any]]:
        return wait_until(lambda: self.events if len(self.events) >= count else None, what=f"{count} events")

    def close(self) -> None:
        """Cut the connection from the client side (what a watcher that goes away does)."""
        self.resp.shutdown()
        assert self.ended.wait(5)


@pytest.fixture
def http() -> urllib3.PoolManager:
    return urllib3.PoolManager(retries=False)


def _create(http: urllib3.PoolManager, cluster: DevCluster | Api, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": name, "labels": labels or {}}, "spec": {"runtime": "python", "mode": {"task": {}}}}
    code, obj, _ = request_json(http, "POST", cluster.url + RUNS, body)
    assert code == 201
    return obj


def _run_in(http: urllib3.PoolManager, cluster: DevCluster | Api, namespace: str, name: str) -> dict[str, Any]:
    body = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": name}, "spec": {"runtime": "python", "mode": {"task": {}}}}
    code, obj, _ = request_json(http, "POST", cluster.url + f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runs", body)
    assert code == 201, obj
    return obj


def test_an_object_leaving_a_watchs_label_selector_arrives_as_deleted_and_returning_as_added(server_api: Api) -> None:
    http, cluster = server_api.http, server_api
    created = _create(http, cluster, "r", {"tier": "gold"})
    stream = StreamReader(http, cluster.url + RUNS + f"?watch=1&labelSelector=tier%3Dgold&resourceVersion={created['metadata']['resourceVersion']}")
    versions = []
    for tier in ("silver", "gold"):
        _, patched, _ = request_json(http, "PATCH", cluster.url + RUNS + "/r", {"metadata": {"labels": {"tier": tier}}}, content_type="application/merge-patch+json")
        versions.append(patched["metadata"]["resourceVersion"])
    events = stream.wait_for(2)
    # leaving: the object as it last matched, at the version of the change that took it out
    assert [(e["type"], e["object"]["metadata"]["labels"]["tier"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("DELETED", "gold", versions[0]), ("ADDED", "gold", versions[1])]
    stream.close()


def test_watches_that_allow_bookmarks_receive_them_with_the_current_resource_version(http: urllib3.PoolManager) -> None:
    with DevCluster.start(simulator=None, bookmark_interval=0.2) as cluster:
        created = _create(http, cluster, "r")
        stream = StreamReader(http, cluster.url + RUNS + f"?watch=1&allowWatchBookmarks=true&resourceVersion={created['metadata']['resourceVersion']}&timeoutSeconds=2")
        request_json(http, "POST", cluster.url + "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}})
        _run_in(http, cluster, "elsewhere", "other")  # the server moves past the watch's version
        bookmark = wait_until(lambda: next((e for e in stream.events if e["type"] == "BOOKMARK"), None), what="a bookmark")
        assert bookmark["object"]["kind"] == "Run"
        assert int(bookmark["object"]["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
        assert stream.ended.wait(5)


def test_send_initial_events_ends_the_initial_state_with_an_annotated_bookmark(server_api: Api) -> None:
    http, cluster = server_api.http, server_api
    _create(http, cluster, "a")
    _create(http, cluster, "b")
    stream = StreamReader(http, cluster.url + RUNS + "?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")
    events = stream.wait_for(3)
    assert [e["type"] for e in events[:3]] == ["ADDED", "ADDED", "BOOKMARK"]
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_a_watch_ends_cleanly_after_its_timeout(server_api: Api) -> None:
    http, cluster = server_api.http, server_api
    stream = StreamReader(http, cluster.url + RUNS + "?watch=1&timeoutSeconds=1")
    assert stream.ended.wait(5)
    assert stream.events == []


def test_a_watch_in_table_form_sends_column_headers_only_with_the_first_event(server_api: Api) -> None:
    http, cluster = server_api.http, server_api
    created = _create(http, cluster, "a")
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    resp = http.request("GET", cluster.url + RUNS + f"?watch=1&resourceVersion={created['metadata']['resourceVersion']}&timeoutSeconds=1", headers=accept, preload_content=False)
    _create(http, cluster, "b")
    _create(http, cluster, "c")
    events = [json.loads(line) for line in resp.data.splitlines() if line.strip()]
    assert [e["object"]["kind"] for e in events] == ["Table", "Table"]
    assert events[0]["object"]["columnDefinitions"] and events[1]["object"]["columnDefinitions"] is None
    assert [e["object"]["rows"][0]["cells"][0] for e in events] == ["b", "c"]


def test_write_history_records_every_version_with_verb_subresource_and_user_agent(http: urllib3.PoolManager, cluster: DevCluster) -> None:
    start = cluster.store.resource_version
    _create(http, cluster, "r")
    request_json(http, "PATCH", cluster.url + RUNS + "/r/status", {"status": {"phase": "Running"}}, content_type="application/merge-patch+json", headers={"User-Agent": "tester/1"})
    request_json(http, "DELETE", cluster.url + RUNS + "/r")
    records = cluster.history(since=start)
    assert [(r.event_type, r.verb, r.subresource) for r in records] == [("ADDED", "create", ""), ("MODIFIED", "patch", "status"), ("DELETED", "delete", "")]
    assert records[1].user_agent == "tester/1" and records[1].object["status"] == {"phase": "Running"}
    assert [r.resource_version for r in records] == sorted(r.resource_version for r in records)
    _, over_http, _ = request_json(http, "GET", cluster.url + f"/_devcluster/history?since={start}")
    assert [item["resourceVersion"] for item in over_http["items"]] == [r.resource_version for r in records]


RUNS_GR = GroupResource("kruntimes.io", "runs")


def _put(store: Store, name: str, labels: dict[str, str]) -> None:
    obj = {"metadata": {"name": name, "namespace": "default", "labels": labels}}
    store.transact(RUNS_GR, ObjectKey("default", name), lambda _cur: Put(obj), WriteContext("update"))


def test_store_watchers_get_backlog_and_live_events_without_gap_under_concurrent_writes() -> None:
    store = Store(event_window=100_000)
    def write(i: int) -> None:
        for j in range(300):
            _put(store, f"o{i}", {"n": str(j)})

    writers = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for w in writers:
        w.start()
    subs = [store.subscribe([RUNS_GR], since=0)]
    subs += [store.subscribe([RUNS_GR], since=store.resource_version // 2) for _ in range(3)]
    for w in writers:
        w.join()
    final = store.resource_version
    for sub in subs:
        got = [item.event.resource_version for item in sub.drain() if isinstance(item, Delivery)]
        assert got == sorted(set(got)) and got[-1] == final
        assert got == list(range(got[0], final + 1))


def test_a_no_op_decision_commits_nothing() -> None:
    store = Store()
    _put(store, "a", {})
    before = store.resource_version
    store.transact(RUNS_GR, ObjectKey("default", "a"), lambda _cur: Keep(), WriteContext("update"))
    assert store.resource_version == before and len(store.writes()) == 1


def test_a_bookmark_is_never_older_than_an_event_already_queued() -> None:
    store = Store()
    sub = store.subscribe([RUNS_GR], since=0)
    _put(store, "a", {})
    store.bookmark(sub)
    items = sub.drain()
    assert isinstance(items[0], Delivery) and isinstance(items[1], Bookmark)
    assert items[1].resource_version >= items[0].event.resource_version


def test_a_watcher_far_behind_is_cut_off_and_can_resume_from_its_last_version() -> None:
    store = Store(subscriber_limit=5)
    sub = store.subscribe([RUNS_GR], since=0)
    for i in range(10):
        _put(store, "a", {"n": str(i)})
    assert sub.closed and sub.overflowed
    last = max(item.event.resource_version for item in sub.drain() if isinstance(item, Delivery))
    resumed = store.subscribe([RUNS_GR], since=last)
    assert len(resumed.drain()) == 10 - last


def test_selection_matches_labels_and_fields_together() -> None:
    selection = parse_selection("tier=gold", "spec.runtime=python", ["spec.runtime"])
    assert selection.matches({"metadata": {"labels": {"tier": "gold"}}, "spec": {"runtime": "python"}})
    assert not selection.matches({"metadata": {"labels": {"tier": "gold"}}, "spec": {"runtime": "node"}})
    assert Selection().matches({})


# --- reads from a resourceVersion the server has not reached (as kube-apiserver answers them) ---

TOO_LARGE_CAUSES = [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]


def test_a_list_from_a_resource_version_not_reached_within_three_seconds_is_a_504_too_large(server_api: Api) -> None:
    http, cluster = server_api.http, server_api
    current = server_api.resource_version()
    ahead = current + 1000
    started = time.monotonic()
    code, status, response = request_json(http, "GET", cluster.url + RUNS + f"?resourceVersion={ahead}&limit=10")
    assert time.monotonic() - started >= 2.9, "the server waits for the version first, as kube-apiserver's watch cache does"
    assert code == 504
    # "current" is where the server stands when it answers (a real one writes Leases of its own meanwhile)
    now = re.fullmatch(rf"Timeout: Too large resource version: {ahead}, current: (\d+)", status.get("message", ""))
    assert now is not None and current <= int(now[1]) < ahead, status
    assert status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"Timeout: Too large resource version: {ahead}, current: {now[1]}",
        "reason": "Timeout", "code": 504,
        "details": {"causes": TOO_LARGE_CAUSES, "retryAfterSeconds": 1},
    }
    assert response.headers.get("Retry-After") == "1"


def test_a_list_from_a_resource_version_reached_while_it_waits_is_answered(server_api: Api) -> None:
    """The list waits until the server reaches the version, then answers as of a version at least
    that. Any write reaches it (on the real server another test's, or the server's own Lease
    renewal, may come before "late"): the list holds "late" exactly when its version has it."""
    http, cluster = server_api.http, server_api
    ahead = server_api.resource_version() + 1
    created: list[dict[str, Any]] = []
    timer = threading.Timer(0.5, lambda: created.append(_create(http, cluster, "late")))
    timer.start()
    code, listed, _ = request_json(http, "GET", cluster.url + RUNS + f"?resourceVersion={ahead}")
    timer.join(30)
    assert code == 200 and created, listed
    version = int(listed["metadata"]["resourceVersion"])
    assert version >= ahead
    late_at = int(created[0]["metadata"]["resourceVersion"])
    assert [item["metadata"]["name"] for item in listed["items"]] == (["late"] if late_at <= version else [])


def test_a_watch_from_a_resource_version_not_reached_stays_silent_until_the_server_passes_it(http: urllib3.PoolManager) -> None:
    with DevCluster.start(simulator=None, bookmark_interval=0.2) as cluster:
        ahead = cluster.store.resource_version + 3
        stream = StreamReader(http, cluster.url + RUNS + f"?watch=1&allowWatchBookmarks=true&resourceVersion={ahead}&timeoutSeconds=30")
        _create(http, cluster, "one")
        _create(http, cluster, "two")
        time.sleep(1.0)  # five bookmark intervals: none may carry a version below the watch's
        assert stream.events == [], "neither the writes below its version nor a bookmark below it"
        _create(http, cluster, "three")  # at the watch's version: not delivered
        _create(http, cluster, "four")
        events = wait_until(lambda: [e for e in stream.events if e["type"] != "BOOKMARK"] or None, what="the first write past the version")
        assert [e["object"]["metadata"]["name"] for e in events] == ["four"]
        assert all(int(e["object"]["metadata"]["resourceVersion"]) >= ahead for e in stream.events)
        stream.close()


def test_a_watch_list_from_a_resource_version_not_reached_ends_with_a_too_large_error_event(server_api: Api) -> None:
    http, cluster = server_api.http, server_api
    ahead = server_api.resource_version() + 1000
    stream = StreamReader(http, cluster.url + RUNS + f"?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion={ahead}&timeoutSeconds=30")
    assert stream.ended.wait(10)
    [event] = stream.events
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (504, "Timeout")
    assert event["object"]["details"]["causes"] == TOO_LARGE_CAUSES


def test_a_quiet_watch_gets_a_bookmark_two_seconds_before_its_deadline_once_the_server_moved_on(server_api: Api) -> None:
    http, cluster = server_api.http, server_api
    created = _create(http, cluster, "r")
    stream = StreamReader(http, cluster.url + RUNS + f"?watch=1&allowWatchBookmarks=true&resourceVersion={created['metadata']['resourceVersion']}&timeoutSeconds=4")
    code, elsewhere, _ = request_json(http, "POST", cluster.url + "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "elsewhere-"}})
    assert code == 201
    outside = _run_in(http, cluster, elsewhere["metadata"]["name"], "other")  # a Run this watch does not see
    assert stream.ended.wait(15)
    assert stream.events and {e["type"] for e in stream.events} == {"BOOKMARK"}, "bookmarks only: the Run elsewhere is not this watch's"
    bookmark = stream.events[0]
    assert int(bookmark["object"]["metadata"]["resourceVersion"]) >= int(outside["metadata"]["resourceVersion"])
    # sent about two seconds before the deadline (kube-apiserver dispatches bookmarks once a second)
    assert stream.ended_at - stream.arrived[0] > 0.5, "before the deadline, not at it"


def test_a_quiet_watch_at_the_servers_version_gets_no_bookmark(server_api: Api) -> None:
    http, cluster = server_api.http, server_api
    created = _create(http, cluster, "r")
    stream = StreamReader(http, cluster.url + RUNS + f"?watch=1&allowWatchBookmarks=true&resourceVersion={created['metadata']['resourceVersion']}&timeoutSeconds=3")
    assert stream.ended.wait(10)
    assert stream.events == [], "nothing happened past the watch's version: nothing to mark"
