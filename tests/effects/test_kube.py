"""The raw-JSON client: paging, streaming watches, typed errors and kubectl-style configuration."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import Configuration
from returns.result import Failure, Success

from kruntimes.kubeclient.kube import (
    LEASES,
    PODS,
    RUNS,
    ApiError,
    Kube,
    KubeError,
    error_from_status,
    load_configuration,
    parse_watch_stream,
)
from kruntimes.pure.readers.json import OverlongNumber
from kruntimes.kubeclient.ratelimit import RequestLimiter
from tests.effects.fakes import FakeClock
from tests.effects.stubserver import Reply, Running, Seen, StubServer, lines, running


@pytest.fixture()
def stub() -> Iterator[Running]:
    yield from running(StubServer())


def client_for(server: Running, token: str | None = None) -> Kube:
    configuration = Configuration(host=server.url)
    if token is not None:
        configuration.api_key = {"authorization": f"Bearer {token}"}
    return Kube(configuration, request_timeout=10)


def status(code: int, reason: str, message: str = "") -> dict[str, object]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}


def test_resource_paths_follow_the_api_layout() -> None:
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert RUNS.path("ns", "r1", "status") == "/apis/kruntimes.io/v1alpha1/namespaces/ns/runs/r1/status"
    assert LEASES.path("kube-system", "kruntimes-scheduler") == (
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kruntimes-scheduler"
    )


def test_list_follows_continue_pages_and_returns_the_lists_resource_version(stub: Running) -> None:
    def page(seen: Seen) -> Reply:
        if seen.query.get("continue") == "page2":
            return Reply(body={"metadata": {"resourceVersion": "42"}, "items": [{"metadata": {"name": "c"}}]})
        items = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
        return Reply(body={"metadata": {"resourceVersion": "41", "continue": "page2"}, "items": items})

    stub.stub.route("GET", "/api/v1/pods", page)
    result = client_for(stub).list("/api/v1/pods", {"labelSelector": "runtime"}, page_size=2)
    items, version = result.unwrap()
    assert [item["metadata"] for item in items] == [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    assert version == "42"
    first = stub.stub.seen[0]
    assert first.query == {"labelSelector": "runtime", "limit": "2"}


def test_the_current_version_of_a_collection_is_read_with_one_request_of_one_item(stub: Running) -> None:
    stub.stub.route("GET", "/api/v1/pods", Reply(body={"metadata": {"resourceVersion": "77", "continue": "more"}, "items": [{}]}))
    assert client_for(stub).current_version("/api/v1/pods", {"labelSelector": "runtime"}).unwrap() == "77"
    [seen] = stub.stub.seen
    assert seen.query == {"labelSelector": "runtime", "limit": "1"}


def test_a_missing_object_is_a_not_found_error_with_the_kubernetes_reason(stub: Running) -> None:
    result = client_for(stub).get("/api/v1/namespaces/ns/pods/nope")
    assert isinstance(result, Failure)
    error = result.failure()
    assert (error.kind, error.status, error.reason) == ("not_found", 404, "NotFound")
    assert not error.retriable


def test_patch_status_sends_a_merge_patch_to_the_status_subresource(stub: Running) -> None:
    path = RUNS.path("ns", "r1")
    stub.stub.route("PATCH", path + "/status", Reply(body={"metadata": {"name": "r1", "resourceVersion": "8"}}))
    body = json.dumps({"metadata": {"resourceVersion": "7"}, "status": {"phase": "Scheduled"}})
    result = client_for(stub).patch_status(path, body)
    assert result.unwrap()["metadata"] == {"name": "r1", "resourceVersion": "8"}
    seen = stub.stub.seen[0]
    assert seen.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(seen.body) == json.loads(body)


def test_an_api_server_behind_a_path_prefix_gets_every_request_under_that_prefix(stub: Running) -> None:
    path = RUNS.path("ns", "r1")
    stub.stub.route("PATCH", "/k8s/clusters/c1" + path + "/status", Reply(body={"metadata": {"name": "r1"}}))
    stub.stub.route("GET", "/k8s/clusters/c1" + RUNS.path("ns"), Reply(body={"metadata": {"resourceVersion": "5"}, "items": []}))
    kube = Kube(Configuration(host=stub.url + "/k8s/clusters/c1/"), request_timeout=10)
    assert kube.patch_status(path, "{}").unwrap() == {"metadata": {"name": "r1"}}
    assert kube.list(RUNS.path("ns"), {"labelSelector": "a=b"}).unwrap() == ((), "5")
    assert [(seen.method, seen.path) for seen in stub.stub.seen] == [
        ("PATCH", "/k8s/clusters/c1" + path + "/status"),
        ("GET", "/k8s/clusters/c1" + RUNS.path("ns")),
    ]
    assert stub.stub.seen[1].query["labelSelector"] == "a=b"


def test_a_configured_http_proxy_receives_the_requests_with_their_absolute_address(stub: Running) -> None:
    path = RUNS.path("ns", "r1")
    # A forward proxy is sent the whole address in the request line; the stub records its path part.
    stub.stub.route("GET", path, Reply(body={"metadata": {"name": "r1"}}))
    configuration = Configuration(host="http://api.invalid:6443")
    configuration.proxy = stub.url
    assert Kube(configuration, request_timeout=10).get(path).unwrap() == {"metadata": {"name": "r1"}}
    assert stub.stub.seen[0].headers.get("host") == "api.invalid:6443"


def test_a_stale_resource_version_is_a_conflict(stub: Running) -> None:
    path = RUNS.path("ns", "r1")
    stub.stub.route("PATCH", path + "/status", Reply(409, status(409, "Conflict", "the object has been modified")))
    error = client_for(stub).patch_status(path, "{}").failure()
    assert (error.kind, error.reason) == ("conflict", "Conflict")
    assert "modified" in error.message


def test_create_of_an_existing_object_is_already_exists_not_a_conflict(stub: Running) -> None:
    stub.stub.route("POST", LEASES.path("ns"), Reply(409, status(409, "AlreadyExists")))
    error = client_for(stub).create(LEASES.path("ns"), {"metadata": {"name": "x"}}).failure()
    assert error.kind == "already_exists"


def test_throttling_carries_retry_after_and_is_retriable(stub: Running) -> None:
    stub.stub.route("GET", "/api/v1/pods", Reply(429, status(429, "TooManyRequests"), headers=(("Retry-After", "3"),)))
    error = client_for(stub).get("/api/v1/pods").failure()
    assert (error.kind, error.retry_after, error.retriable) == ("throttled", 3.0, True)


def test_retry_after_seconds_in_the_status_details_count_too() -> None:
    body = {"reason": "ServerTimeout", "code": 500, "details": {"retryAfterSeconds": 2}}
    error = error_from_status(500, body)
    assert (error.kind, error.retry_after) == ("timeout", 2.0)


def test_a_retry_after_past_a_minute_is_a_minute_and_one_that_is_no_number_of_seconds_is_ignored() -> None:
    # 1e300 seconds, or inf, would be a sleep no thread wakes from (or one that raises OverflowError)
    cases = [("2.5", 2.5), ("120", 60.0), ("1e300", 60.0), ("inf", 60.0), ("nan", None), ("-1", None), ("soon", None)]
    assert [error_from_status(429, None, header).retry_after for header, _ in cases] == [expected for _, expected in cases]
    assert error_from_status(500, {"details": {"retryAfterSeconds": 10**400}}).retry_after == 60.0
    assert error_from_status(500, {"details": {"retryAfterSeconds": float("nan")}}).retry_after is None


def test_a_list_holding_a_number_longer_than_python_converts_is_read_whole(stub: Running) -> None:
    # json.loads refuses the whole body (ValueError) for one such number: the list would never be read
    huge = b"9" * 5000
    body = b'{"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "a"}, "spec": {"n": ' + huge + b'}}, {"metadata": {"name": "b"}}]}'
    stub.stub.route("GET", "/api/v1/pods", Reply(chunks=[body]))
    items, version = client_for(stub).list("/api/v1/pods").unwrap()
    assert [item["metadata"] for item in items] == [{"name": "a"}, {"name": "b"}]
    assert (items[0]["spec"], version) == ({"n": OverlongNumber(5000)}, "5")


def test_a_list_holding_an_object_nested_past_pythons_recursion_is_read_whole(stub: Running) -> None:
    # json.loads raises RecursionError for it; a server whose CRD preserves unknown fields stores it
    deep = b'{"k": [' * 20_000 + b"0" + b"]}" * 20_000
    body = b'{"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "a"}, "spec": ' + deep + b'}, {"metadata": {"name": "b"}}]}'
    stub.stub.route("GET", "/api/v1/pods", Reply(chunks=[body]))
    items, version = client_for(stub).list("/api/v1/pods").unwrap()
    assert [item["metadata"] for item in items] == [{"name": "a"}, {"name": "b"}] and version == "5"


def test_a_watch_event_holding_a_number_longer_than_python_converts_is_delivered() -> None:
    line = b'{"type": "ADDED", "object": {"metadata": {"resourceVersion": "3"}, "spec": {"n": -' + b"1" * 5000 + b"}}}\n"
    events = list(parse_watch_stream([line]))
    assert [(e.type, e.resource_version, e.object["spec"]) for e in events] == [("ADDED", "3", {"n": OverlongNumber(5000)})]


def test_a_bearer_token_from_the_configuration_is_sent(stub: Running) -> None:
    stub.stub.route("GET", "/api/v1/pods", Reply(body={"items": [], "metadata": {"resourceVersion": "1"}}))
    client_for(stub, token="s3cret").list("/api/v1/pods")
    assert stub.stub.seen[0].headers["authorization"] == "Bearer s3cret"


class _RotatingToken:
    """A kubeconfig loader's refresh hook: counts how often it is asked, serves ``token``."""

    def __init__(self) -> None:
        self.token = "first"
        self.asked = 0

    def __call__(self, configuration: Configuration) -> None:
        self.asked += 1
        configuration.api_key = {"BearerToken": self.token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}


def rotating_client(server: Running, hook: _RotatingToken, clock: list[float]) -> Kube:
    configuration = Configuration(host=server.url)
    configuration.api_key = {"BearerToken": hook.token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    setattr(configuration, "refresh_api_key_hook", hook)  # the package annotates the attribute as None: loaders set it
    return Kube(configuration, request_timeout=10, clock=lambda: clock[0])


def test_a_burst_of_requests_asks_the_kubeconfig_loader_for_the_token_once(stub: Running) -> None:
    stub.stub.route("GET", "/api/v1/pods", Reply(body={"items": [], "metadata": {"resourceVersion": "1"}}))
    hook, clock = _RotatingToken(), [100.0]
    kube = rotating_client(stub, hook, clock)
    for _ in range(20):
        kube.get("/api/v1/pods").unwrap()
        clock[0] += 0.01
    assert hook.asked == 1
    assert {seen.headers["authorization"] for seen in stub.stub.seen} == {"Bearer first"}


def test_a_token_the_loader_replaced_is_sent_within_a_second(stub: Running) -> None:
    stub.stub.route("GET", "/api/v1/pods", Reply(body={"items": [], "metadata": {"resourceVersion": "1"}}))
    hook, clock = _RotatingToken(), [100.0]
    kube = rotating_client(stub, hook, clock)
    kube.get("/api/v1/pods").unwrap()
    hook.token = "second"
    clock[0] += 1.0
    kube.get("/api/v1/pods").unwrap()
    assert [seen.headers["authorization"] for seen in stub.stub.seen] == ["Bearer first", "Bearer second"]


def test_an_answer_401_makes_the_next_request_read_the_token_again(stub: Running) -> None:
    unauthorized = Reply(401, {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "token expired"})
    stub.stub.route("GET", "/api/v1/pods", unauthorized)
    hook, clock = _RotatingToken(), [100.0]
    kube = rotating_client(stub, hook, clock)
    assert kube.get("/api/v1/pods").failure().kind == "unauthorized"
    hook.token = "second"
    kube.get("/api/v1/pods")  # at the same instant: no second of reuse after a 401
    assert stub.stub.seen[-1].headers["authorization"] == "Bearer second"


def test_an_unreachable_server_is_a_retriable_error_that_says_the_request_never_left() -> None:
    kube = Kube(Configuration(host="http://127.0.0.1:9"), request_timeout=2)
    error = kube.get("/api/v1/pods").failure()
    assert (error.kind, error.status, error.retriable) == ("unreachable", 0, True)
    with pytest.raises(KubeError) as raised:
        list(kube.watch("/api/v1/pods", "1"))
    assert raised.value.error.kind == "unreachable"


def test_watch_streams_events_split_across_chunks_and_asks_for_bookmarks(stub: Running) -> None:
    added = {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}}
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    deleted = {"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "10"}}}
    raw = lines(added, bookmark, deleted)
    cut1, cut2 = 17, len(raw) - 5
    stub.stub.route("GET", "/api/v1/pods", Reply(chunks=[raw[:cut1], raw[cut1:cut2], raw[cut2:]]))
    events = list(client_for(stub).watch("/api/v1/pods", "4", timeout_seconds=60, params={"labelSelector": "runtime"}))
    assert [(e.type, e.resource_version) for e in events] == [("ADDED", "5"), ("BOOKMARK", "9"), ("DELETED", "10")]
    query = stub.stub.seen[0].query
    assert query == {
        "watch": "true",
        "resourceVersion": "4",
        "timeoutSeconds": "60",
        "allowWatchBookmarks": "true",
        "labelSelector": "runtime",
    }


def test_an_expired_resource_version_in_the_stream_raises_gone(stub: Running) -> None:
    error_frame = {"type": "ERROR", "object": status(410, "Expired", "too old resource version")}
    stub.stub.route("GET", "/api/v1/pods", Reply(chunks=[lines(error_frame)]))
    with pytest.raises(KubeError) as raised:
        list(client_for(stub).watch("/api/v1/pods", "1"))
    assert (raised.value.error.kind, raised.value.error.status, raised.value.error.reason) == ("gone", 410, "Expired")


def test_a_watch_refused_at_open_raises_the_servers_error(stub: Running) -> None:
    stub.stub.route("GET", "/api/v1/pods", Reply(410, status(410, "Gone")))
    with pytest.raises(KubeError) as raised:
        list(client_for(stub).watch("/api/v1/pods", "1"))
    assert raised.value.error.kind == "gone"


def test_a_garbled_watch_line_is_a_bad_response() -> None:
    with pytest.raises(KubeError) as raised:
        list(parse_watch_stream([b'{"type": "ADDED", "object": {}}\n{not json\n']))
    assert raised.value.error.kind == "bad_response"


def test_a_final_line_without_newline_still_counts() -> None:
    events = list(parse_watch_stream([b'{"type": "MODIFIED", "object": {"metadata": {"resourceVersion": "3"}}}']))
    assert [e.resource_version for e in events] == ["3"]


# --- configuration ----------------------------------------------------------------------------

KUBECONFIG_TEMPLATE = """
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{server}"}}
users:
- name: u
  user: {{token: "{token}"}}
contexts:
- name: main
  context: {{cluster: c, user: u}}
- name: other
  context: {{cluster: c, user: u, namespace: x}}
current-context: main
"""


def write_kubeconfig(path: Path, server: str, token: str = "t") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(KUBECONFIG_TEMPLATE.format(server=server, token=token), encoding="utf-8")
    return path


def test_the_kubeconfig_flag_wins_over_the_environment_and_home(tmp_path: Path) -> None:
    flag = write_kubeconfig(tmp_path / "flag.yaml", "https://flag.example:6443")
    env = write_kubeconfig(tmp_path / "env.yaml", "https://env.example:6443")
    write_kubeconfig(tmp_path / "home" / ".kube" / "config", "https://home.example:6443")
    loaded = load_configuration(str(flag), environ={"KUBECONFIG": str(env)}, home=tmp_path / "home").unwrap()
    assert (loaded.source, loaded.configuration.host) == ("flag", "https://flag.example:6443")


def test_kubeconfig_from_the_environment_wins_over_home(tmp_path: Path) -> None:
    env = write_kubeconfig(tmp_path / "env.yaml", "https://env.example:6443", token="envtoken")
    write_kubeconfig(tmp_path / "home" / ".kube" / "config", "https://home.example:6443")
    loaded = load_configuration(environ={"KUBECONFIG": str(env)}, home=tmp_path / "home").unwrap()
    assert (loaded.source, loaded.configuration.host) == ("env", "https://env.example:6443")
    bearer = loaded.configuration.auth_settings().get("BearerToken")
    assert bearer is not None and bearer["value"] == "Bearer envtoken"


def test_home_kubeconfig_is_used_when_nothing_else_is_given(tmp_path: Path) -> None:
    write_kubeconfig(tmp_path / "home" / ".kube" / "config", "https://home.example:6443")
    loaded = load_configuration(environ={}, home=tmp_path / "home").unwrap()
    assert (loaded.source, loaded.configuration.host) == ("home", "https://home.example:6443")


def test_a_named_context_is_honoured(tmp_path: Path) -> None:
    flag = write_kubeconfig(tmp_path / "flag.yaml", "https://flag.example:6443")
    assert isinstance(load_configuration(str(flag), "other", environ={}, home=tmp_path), Success)
    missing = load_configuration(str(flag), "no-such-context", environ={}, home=tmp_path)
    assert isinstance(missing, Failure)


def test_no_configuration_anywhere_is_an_explained_error(tmp_path: Path) -> None:
    result = load_configuration(environ={}, home=tmp_path)
    assert isinstance(result, Failure)
    assert "--kubeconfig" in result.failure().message


def test_a_broken_kubeconfig_is_an_error_not_a_crash(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Config\n", encoding="utf-8")
    assert isinstance(load_configuration(str(broken), environ={}, home=tmp_path), Failure)
    assert isinstance(load_configuration(str(tmp_path / "absent.yaml"), environ={}, home=tmp_path), Failure)


def test_api_error_prints_kind_status_and_reason() -> None:
    assert str(ApiError("conflict", 409, "Conflict", "changed")) == "conflict (HTTP 409 Conflict): changed"


# --- the client's own rate limit (--kube-api-qps, --kube-api-burst) ---


def test_requests_beyond_the_burst_wait_their_turn_at_the_configured_rate(stub: Running) -> None:
    """Every request and every watch it opens takes a token: after a burst of 3, at 10 a second,
    each further one waits 0.1 s more (on a simulated clock)."""
    clock = FakeClock()
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)

    stub.stub.route("GET", "/api/v1/pods/p", Reply(200, {"metadata": {"name": "p"}}))
    stub.stub.route("GET", "/api/v1/pods", Reply(chunks=[lines()]))
    kube = Kube(Configuration(host=stub.url), request_timeout=10, limiter=RequestLimiter(10, 3, clock=clock, sleep=sleep))
    for _ in range(5):
        assert kube.get("/api/v1/pods/p").unwrap() == {"metadata": {"name": "p"}}
    assert list(kube.watch("/api/v1/pods", "1")) == []
    assert len(stub.stub.seen) == 6
    assert waits == pytest.approx([0.1, 0.1, 0.1])
    assert clock() == pytest.approx(1000.3)


def test_callers_waiting_together_are_spaced_by_the_rate() -> None:
    clock = FakeClock()
    limiter = RequestLimiter(5, 1, clock=clock, sleep=lambda seconds: None)  # nobody sleeps: reservations only
    assert [limiter.take() for _ in range(4)] == pytest.approx([0.0, 0.2, 0.4, 0.6])
    clock.advance(2.0)  # a quiet spell pays the debt and refills the bucket to its burst of one, no further
    assert [limiter.take() for _ in range(2)] == pytest.approx([0.0, 0.2])


def test_a_rate_of_zero_never_waits() -> None:
    limiter = RequestLimiter(0, 1, clock=FakeClock(), sleep=lambda seconds: pytest.fail("slept"))
    assert [limiter.take() for _ in range(1000)] == [0.0] * 1000


def test_a_write_whose_answer_is_not_read_succeeds_on_a_2xx_answer_and_keeps_the_error_of_any_other(
    stub: Running,
) -> None:
    events = "/api/v1/namespaces/ns/events"
    stub.stub.route("POST", events, Reply(201))  # no body: an answer read would be a bad_response
    stub.stub.route("PATCH", events + "/gone", Reply(404, status(404, "NotFound")))
    kube = client_for(stub)
    assert isinstance(kube.create(events, {"metadata": {"name": "e"}}, read=False), Success)
    assert kube.create(events, {"metadata": {"name": "e"}}).failure().kind == "bad_response"
    missing = kube.patch(events + "/gone", '{"count":2}', read=False).failure()
    assert (missing.kind, missing.reason) == ("not_found", "NotFound")
