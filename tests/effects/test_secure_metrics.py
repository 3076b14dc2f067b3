"""``--metrics-secure``: HTTPS, tokens checked by TokenReview and callers authorised by SubjectAccessReview.

The reviews go to the dev cluster, whose users come from a token file and whose ABAC policy says
who may GET /metrics, through the same client the scheduler uses.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from returns.result import Failure, Result, Success

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.auth import Authorizer, parse_policy_file, parse_token_file
from kruntimes.kubeclient.kube import ApiError, JSONObject, Kube, load_configuration
from kruntimes.effects.metrics import ALL_ENDPOINTS, MetricsServer, Probes, SchedulerMetrics, serve
from kruntimes.kubeclient.secureserving import (
    DelegatedAuth,
    SecureServing,
    SecureServingOptions,
    TlsContexts,
    TtlCache,
    bearer_token,
    self_signed_pem,
)

ADMIN = "admin-token"
TOKENS = 'reader-token,prometheus,1001,"monitoring"\nstranger-token,stranger,1002\n'
POLICY = (
    '{"apiVersion": "abac.authorization.kubernetes.io/v1beta1", "kind": "Policy",'
    ' "spec": {"user": "prometheus", "nonResourcePath": "/metrics", "readonly": true}}\n'
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    authorizer = Authorizer(tokens=parse_token_file(TOKENS), policy=parse_policy_file(POLICY))
    with DevCluster.start(simulator=None, token=ADMIN, authorizer=authorizer) as running:
        yield running


@pytest.fixture()
def kube(cluster: DevCluster, tmp_path: Path) -> Iterator[Kube]:
    loaded = load_configuration(str(cluster.kubeconfig_path(tmp_path))).unwrap()
    client = Kube(loaded.configuration, request_timeout=10)
    yield client
    client.close()


class CountingReviewer:
    """The scheduler's client, counting the reviews it sends."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.calls = 0

    def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
        self.calls += 1
        return self.kube.create(path, body)


class BrokenReviewer:
    """An API server that cannot be reached."""

    def __init__(self) -> None:
        self.calls = 0

    def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
        self.calls += 1
        return Failure(ApiError("unreachable", 0, "", "connection refused"))


def start(reviewer: CountingReviewer | BrokenReviewer, metrics: SchedulerMetrics, options: SecureServingOptions = SecureServingOptions()) -> MetricsServer:
    secure = SecureServing(TlsContexts(options), DelegatedAuth(reviewer, options, registry=metrics.registry))
    return serve(metrics.registry, Probes(ready=lambda: True), host="127.0.0.1", port=0, endpoints=ALL_ENDPOINTS, secure=secure)


INSECURE = ssl.create_default_context()
INSECURE.check_hostname = False
INSECURE.verify_mode = ssl.CERT_NONE


def fetch(url: str, token: str | None = None, context: ssl.SSLContext = INSECURE) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture()
def secured(kube: Kube) -> Iterator[tuple[MetricsServer, SchedulerMetrics, CountingReviewer]]:
    metrics = SchedulerMetrics()
    reviewer = CountingReviewer(kube)
    server = start(reviewer, metrics)
    try:
        yield server, metrics, reviewer
    finally:
        server.close()


def test_a_reader_with_a_good_token_scrapes_over_https(secured: tuple[MetricsServer, SchedulerMetrics, CountingReviewer]) -> None:
    server, metrics, _ = secured
    metrics.count_sync("scheduled")
    assert server.url.startswith("https://")
    status, body = fetch(server.url + "/metrics", "reader-token")
    assert status == 200
    assert 'kruntimes_scheduler_sync_total{result="scheduled"} 1.0' in body
    assert metrics.value("kruntimes_scheduler_metrics_auth_decisions_total", {"decision": "allowed"}) == 1


def test_no_token_is_401_and_asks_the_api_server_nothing(secured: tuple[MetricsServer, SchedulerMetrics, CountingReviewer]) -> None:
    server, _, reviewer = secured
    assert fetch(server.url + "/metrics") == (401, "Unauthorized\n")
    assert reviewer.calls == 0


def test_an_unknown_token_is_401(secured: tuple[MetricsServer, SchedulerMetrics, CountingReviewer]) -> None:
    server, metrics, _ = secured
    assert fetch(server.url + "/metrics", "made-up-token")[0] == 401
    assert metrics.value("kruntimes_scheduler_metrics_auth_decisions_total", {"decision": "unauthenticated"}) == 1


def test_a_known_user_without_the_permission_is_403(secured: tuple[MetricsServer, SchedulerMetrics, CountingReviewer]) -> None:
    server, _, _ = secured
    assert fetch(server.url + "/metrics", "stranger-token") == (403, "Authorization denied for user stranger\n")


def test_the_reader_may_get_metrics_and_nothing_else(secured: tuple[MetricsServer, SchedulerMetrics, CountingReviewer]) -> None:
    server, _, _ = secured
    assert fetch(server.url + "/debug/pprof", "reader-token")[0] == 403, "authorised before routing, as kube's filters are"


def test_probes_need_no_token(secured: tuple[MetricsServer, SchedulerMetrics, CountingReviewer]) -> None:
    server, _, reviewer = secured
    assert fetch(server.url + "/healthz") == (200, "ok\n")
    assert fetch(server.url + "/readyz") == (200, "ok\n")
    assert reviewer.calls == 0


def test_plain_http_to_the_secure_port_gets_no_metrics(secured: tuple[MetricsServer, SchedulerMetrics, CountingReviewer]) -> None:
    server, _, _ = secured
    plain = server.url.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        fetch(plain + "/metrics", "reader-token")


def test_answers_are_cached_for_a_while(secured: tuple[MetricsServer, SchedulerMetrics, CountingReviewer]) -> None:
    server, _, reviewer = secured
    for _ in range(3):
        assert fetch(server.url + "/metrics", "reader-token")[0] == 200
        assert fetch(server.url + "/metrics", "stranger-token")[0] == 403
    assert reviewer.calls == 4, "one TokenReview and one SubjectAccessReview per user, then the cache"


def test_a_review_that_fails_denies_counts_and_is_not_cached(caplog: pytest.LogCaptureFixture) -> None:
    metrics = SchedulerMetrics()
    reviewer = BrokenReviewer()
    server = start(reviewer, metrics)
    try:
        for _ in range(3):
            status, body = fetch(server.url + "/metrics", "reader-token")
            assert status == 500 and "kruntimes_scheduler" not in body
        assert fetch(server.url + "/healthz")[0] == 200
    finally:
        server.close()
    assert reviewer.calls == 3, "a failure is never cached: the next scrape asks again"
    assert metrics.value("kruntimes_scheduler_metrics_auth_review_errors_total", {"review": "token"}) == 3
    assert metrics.value("kruntimes_scheduler_metrics_auth_decisions_total", {"decision": "review_error"}) == 3
    warnings = [r for r in caplog.records if "denied" in r.getMessage()]
    assert len(warnings) == 1, "the warning is rate-limited"
    assert "reader-token" not in caplog.text


def test_a_malformed_access_review_answer_denies() -> None:
    class Odd:
        def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
            if path.endswith("tokenreviews"):
                return Success({"status": {"authenticated": True, "user": {"username": "u"}}})
            return Success({"status": {"allowed": "yes"}})

    auth = DelegatedAuth(Odd())
    verdict = auth.check("/metrics", "GET", "Bearer t")
    assert (verdict.decision, verdict.status) == ("review_error", 500)


def test_given_certificate_files_are_served(kube: Kube, tmp_path: Path) -> None:
    cert, key = self_signed_pem(("localhost", "127.0.0.1"))
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    options = SecureServingOptions(cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key")
    assert options.problems() == ()
    metrics = SchedulerMetrics()
    server = start(CountingReviewer(kube), metrics, options)
    trusting = ssl.create_default_context(cadata=cert.decode())
    try:
        status, _ = fetch(f"https://localhost:{server.port}/metrics", "reader-token", context=trusting)
        assert status == 200, "the certificate verifies against itself as a CA for localhost"
    finally:
        server.close()


def test_unusable_certificate_files_are_a_problem(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    options = SecureServingOptions(cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key")
    assert any("--tls-cert-file" in p for p in options.problems())
    assert SecureServingOptions(cert_file=tmp_path / "tls.crt").problems() == ("--tls-cert-file and --tls-private-key-file go together",)


def test_bearer_headers_are_read_as_kube_reads_them() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer abc") == "abc"
    for bad in (None, "", "Bearer", "Bearer ", "Basic abc", "Bearer a b"):
        assert bearer_token(bad) is None, bad


def test_the_cache_is_bounded_and_entries_expire() -> None:
    now = [0.0]
    cache: TtlCache[int, str] = TtlCache(2, lambda: now[0])
    cache.put(1, "a", 10)
    cache.put(2, "b", 10)
    cache.put(3, "c", 10)
    assert len(cache) == 2 and cache.get(1) == (False, None)
    assert cache.get(3) == (True, "c")
    now[0] = 10.0
    assert cache.get(3) == (False, None)


def test_a_scheduler_with_metrics_secure_serves_metrics_over_https_and_probes_over_http(kube: Kube) -> None:
    from kruntimes.effects.runner import Scheduler, SchedulerOptions

    options = SchedulerOptions(
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        metrics_secure=SecureServingOptions(),
        namespaces=("default",),
    )
    scheduler = Scheduler(kube, options)
    scheduler.start()
    try:
        assert scheduler.metrics_url is not None and scheduler.metrics_url.startswith("https://")
        assert scheduler.health_url is not None and scheduler.health_url.startswith("http://")
        assert fetch(scheduler.metrics_url + "/metrics")[0] == 401
        status, body = fetch(scheduler.metrics_url + "/metrics", "reader-token")
        assert status == 200 and "kruntimes_scheduler_metrics_auth_decisions_total" in body
        assert fetch(scheduler.health_url + "/healthz") == (200, "ok\n")
    finally:
        scheduler.stop(timeout=5)


def test_rotated_certificate_files_are_served_from_the_next_connection(tmp_path: Path) -> None:
    cert_path, key_path = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = self_signed_pem(("localhost",))
    cert_path.write_bytes(first[0])
    key_path.write_bytes(first[1])
    now = [0.0]
    contexts = TlsContexts(SecureServingOptions(cert_file=cert_path, key_file=key_path), clock=lambda: now[0])
    before = contexts.current()
    second = self_signed_pem(("localhost",))
    cert_path.write_bytes(second[0] + b"\n")  # a different size, whatever the file system's mtime resolution
    key_path.write_bytes(second[1])
    assert contexts.current() is before, "files are looked at no more than once a second"
    now[0] = 2.0
    assert contexts.current() is not before
    key_path.write_text("half-written")
    now[0] = 4.0
    kept = contexts.current()
    assert kept is not before and kept is contexts.current(), "a broken rotation keeps the last good certificate"
