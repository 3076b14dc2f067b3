"""No one gets in through the scheduler: its HTTP servers answer three paths only, the dev server stays on
loopback unless told otherwise (and says so loudly), and the RBAC in deploy/ is exactly what the scheduler uses."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from kruntimes.devcluster import DevCluster, SimulatorSettings
from kruntimes.devcluster.cluster import is_loopback
from kruntimes.devcluster.command import configure
from kruntimes.devcluster.store import WriteContext
from kruntimes.devcluster.types import GroupResource
from kruntimes.effects.runner import LeaderElectionOptions
from tests.deploy import rbac
from tests.deploy.manifests import DEPLOY, load_all

from .support import HOSTILE_AGENT, PODS, RUNS, RequestRecorder, create, run_phase, scheduler, wait_until

WORKSPACES = GroupResource("kruntimes.io", "persistentworkspaces")
ALLOWED = {"/metrics", "/healthz", "/livez", "/readyz"}
AGENT = "kruntimes-scheduler/rbac"
"""The User-Agent of the scheduler under test: only its requests are judged (a stray client
that reaches a reused port, e.g. another test's scheduler, is not this scheduler)."""
PROBES = [
    "/", "/metrics/", "/metrics/../healthz", "/debug/pprof/", "/debug/vars", "/admin", "/_devcluster/faults",
    "/%2e%2e/%2e%2e/etc/passwd", "/../../etc/passwd", "/healthz/extra", "/readyz?verbose", "//evil.example/metrics", "/.git/config",
    "/favicon.ico", "/metrics.json", "/static/", "/index.html", "/%00", "/" + "a" * 5000,
]


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0), auto_create_namespaces=True, bookmark_interval=1.0) as running:
        yield running


def request(url: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=5)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        conn.putheader("Content-Length", str(len(body or b"")))
        conn.putheader("X-Probe", "reflected-secret")
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def assert_only_these_paths(url: str, allowed: set[str]) -> None:
    for path in sorted(allowed):
        status, _ = request(url, "GET", path)
        assert status in (200, 503), (path, status)  # /readyz may be 503 while not ready
    for path in PROBES + sorted(ALLOWED - allowed):
        status, body = request(url, "GET", path)
        if path.split("?")[0] in allowed:
            continue
        assert status == 404, (path, status)
        assert b"<a href" not in body.lower() and b"index of" not in body.lower(), "no directory listing"
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"):
        for path in sorted(allowed):
            status, body = request(url, method, path, b"x")
            assert status in (404, 405, 501), (method, path, status)
            assert b"reflected-secret" not in body, "a request header is never echoed (no TRACE reflection)"


def test_metrics_and_probe_servers_answer_their_own_paths_only(cluster: DevCluster, tmp_path: Path) -> None:
    with scheduler(cluster, tmp_path) as running:
        assert running.metrics_url and running.health_url and running.metrics_url != running.health_url
        assert_only_these_paths(running.metrics_url, {"/metrics"})
        assert_only_these_paths(running.health_url, {"/healthz", "/livez", "/readyz"})


def test_one_shared_port_answers_the_four_paths(cluster: DevCluster, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    with scheduler(cluster, tmp_path, metrics_bind_address=address, health_probe_bind_address=address) as running:
        assert running.metrics_url == running.health_url
        assert running.metrics_url is not None
        assert_only_these_paths(running.metrics_url, ALLOWED)


# --- the dev server stays on loopback -------------------------------------------------------


def test_the_dev_server_defaults_to_loopback() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    configure(parser)
    assert parser.parse_args([]).host == "127.0.0.1"
    with DevCluster.start(simulator=None) as cluster:
        assert is_loopback(cluster.host)
        assert cluster.url.startswith("http://127.0.0.1:")


def _banner(*extra: str) -> str:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kruntimes.devcluster", "--port", "0", "--no-simulator", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "Ctrl-C" in line:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    return "".join(lines)


def test_a_non_loopback_dev_server_warns_loudly() -> None:
    loopback = _banner()
    assert "(loopback only)" in loopback and "WARNING" not in loopback
    exposed = _banner("--host", "0.0.0.0")
    assert re.search(r"WARNING: bound to 0\.0\.0\.0, reachable from other machines WITHOUT authentication", exposed), exposed
    with_token = _banner("--host", "0.0.0.0", "--token", "s3cret")
    assert "WARNING: bound to 0.0.0.0" in with_token and "WITHOUT" not in with_token


def _external_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = str(s.getsockname()[0])
    except OSError:
        return None
    return None if is_loopback(address) else address


def test_admin_endpoints_refuse_non_loopback_clients() -> None:
    address = _external_address()
    if address is None:
        pytest.skip("no non-loopback interface on this machine")
    with DevCluster.start(host="0.0.0.0", simulator=None) as cluster:
        status, _ = request(f"http://{address}:{cluster.port}", "GET", "/_devcluster/history")
        assert status == 403
        status, _ = request(f"http://{address}:{cluster.port}", "POST", "/_devcluster/faults", json.dumps({"action": "clear"}).encode())
        assert status == 403
        status, _ = request(f"http://127.0.0.1:{cluster.port}", "GET", "/_devcluster/stats")
        assert status == 200


# --- RBAC: exactly what the scheduler uses -------------------------------------------------


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _pod(cluster: DevCluster, name: str, *, ready: bool = True) -> None:
    now = _stamp()
    create(cluster, PODS, "team-a", {
        "metadata": {"name": name, "labels": {"runtime": "python"}},
        "spec": {"containers": [{"name": "runtimed", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now},
            {"type": "kruntimes.io/RuntimedReady", "status": "True", "lastProbeTime": "2999-01-01T00:00:00Z", "lastTransitionTime": now},
        ]},
    }, subresource="status")


def test_rbac_is_exactly_what_the_scheduler_uses(cluster: DevCluster, tmp_path: Path) -> None:
    recorder = RequestRecorder(cluster)
    objects = load_all(DEPLOY / "scheduler" / "rbac.yaml") + load_all(DEPLOY / "scheduler" / "leader-election-rbac.yaml")
    grants = rbac.grants_for(objects)
    election = LeaderElectionOptions(namespace="kruntimes-system", lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)
    with scheduler(cluster, tmp_path, identity="rbac", leader_election=election, event_repeat_interval=0.1, ambiguous_hold=0.5) as running:
        assert running.wait_leading(10)
        _pod(cluster, "p0")
        # seen before any Run is planned, so the first status write for "bound" is its bind
        wait_until(lambda: running.state.get().pod("team-a", "p0") is not None, what="the pod seen by the scheduler")
        # the first bind's answer is a 500: its outcome is unknown until a read of the Run settles it
        cluster.faults.error(500, "runs", subresource="status", verbs=("patch",), count=1, name="bound")
        create(cluster, WORKSPACES, "team-a", {"metadata": {"name": "ws"}, "spec": {"runtime": "python", "mode": "RuntimePodLocal"}})
        for name, spec in (("bound", {}), ("waits", {"resources": {"requests": {"gpu": "1"}}}), ("fails", {"resources": {"requests": {"runs": "500m"}}})):
            create(cluster, RUNS, "team-a", {"metadata": {"name": name}, "spec": {"runtime": "python", "mode": {"task": {}}, **spec}})
        wait_until(lambda: run_phase(cluster, "team-a", "bound") == "Scheduled" and run_phase(cluster, "team-a", "fails") == "Failed", what="decisions")
        wait_until(lambda: any(s.verb == "create" and s.resource == "events" for s in recorder.by(AGENT)), what="an Event")
        # a change to the waiting Run itself re-plans it: the same FailedScheduling again is a patch of its Event
        rd = cluster.registry.storage(RUNS)
        assert rd is not None
        for index in range(5):
            body = {"metadata": {"labels": {"nudge": str(index)}}}
            cluster.service.patch(rd, "team-a", "waits", "application/merge-patch+json", body, WriteContext("patch", user_agent=HOSTILE_AGENT))
            if any(s.verb == "patch" and s.resource == "events" for s in recorder.by(AGENT)):
                break
            time.sleep(0.5)
        wait_until(lambda: any(s.verb == "patch" and s.resource == "events" for s in recorder.by(AGENT)), what="an Event patch")
    used = recorder.by(AGENT)
    assert used, "the scheduler's requests are recorded"
    missing = rbac.uncovered(grants, used)
    assert not missing, f"requests the RBAC in deploy/ does not grant: {sorted({(m.verb, m.group, m.resource, m.subresource, m.namespace) for m in missing})}"
    extra = rbac.unused(grants, used)
    assert not extra, f"granted but never used: {sorted(extra)}"
