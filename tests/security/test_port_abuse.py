"""The metrics and probe ports under abuse: many idle connections, silent ones, slow ones, huge heads.

A hostile neighbour that can reach a port must not be able to take a thread per connection, hold a
connection for ever, or make the process buffer without bound; past the connection limit a
connection is reset at once, and the probes of a port of their own keep answering.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from returns.result import Failure, Result

from kruntimes.devcluster import DevCluster
from kruntimes.kubeclient.httpserving import DEFAULT_LIMITS, DropReason, Limits
from kruntimes.kubeclient.kube import ApiError, JSONObject
from kruntimes.effects.metrics import ALL_ENDPOINTS, MetricsServer, Probes, SchedulerMetrics, serve
from kruntimes.kubeclient.secureserving import DelegatedAuth, SecureServing, SecureServingOptions, TlsContexts

from .support import scheduler, wait_until

DROPPED = "kruntimes_scheduler_http_dropped_connections_total"


@pytest.fixture
def cluster() -> Iterator[DevCluster]:
    with DevCluster.start(simulator=None) as running:
        yield running


class NoApiServer:
    def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
        return Failure(ApiError("unreachable", 0, "", "no API server in this test"))


class Drops:
    """``on_drop``: what the server reported, safe to read from the test's thread."""

    def __init__(self) -> None:
        self.seen: list[DropReason] = []
        self._lock = threading.Lock()

    def __call__(self, reason: DropReason) -> None:
        with self._lock:
            self.seen.append(reason)

    def count(self, reason: DropReason) -> int:
        with self._lock:
            return self.seen.count(reason)


def start(limits: Limits = DEFAULT_LIMITS, *, secure: bool = False) -> tuple[MetricsServer, Drops]:
    metrics = SchedulerMetrics()
    drops = Drops()
    serving = None
    if secure:
        options = SecureServingOptions()
        serving = SecureServing(TlsContexts(options), DelegatedAuth(NoApiServer(), options, registry=metrics.registry))
    server = serve(
        metrics.registry, Probes(ready=lambda: True), host="127.0.0.1", port=0,
        endpoints=ALL_ENDPOINTS, secure=serving, limits=limits, on_drop=drops,
    )
    return server, drops


def connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=10)


def fate(sock: socket.socket, within: float) -> str:
    """What the server did with a connection that sent nothing more: ``reset`` (refused: RST),
    ``closed`` (FIN), ``answered`` (bytes came), or ``open`` after ``within`` seconds."""
    sock.settimeout(within)
    try:
        data = sock.recv(1)
    except ConnectionResetError:
        return "reset"
    except TimeoutError:
        return "open"
    return "closed" if data == b"" else "answered"


def fate_of_new(url: str, within: float) -> str:
    """``fate`` of a new connection; ``reset`` too when the reset came before ``connect`` returned."""
    try:
        sock = connect(url)
    except ConnectionResetError:
        return "reset"
    with sock:
        return fate(sock, within)


def http_get(url: str, path: str, timeout: float = 10.0) -> int:
    with connect(url) as sock:
        sock.settimeout(timeout)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return int(answer.split(b" ", 2)[1])


def serves(url: str, path: str) -> bool:
    """``path`` answers 200 (``False`` while the port still refuses: it may not have seen the last close yet)."""
    try:
        return http_get(url, path) == 200
    except OSError:
        return False


def dribble(sock: socket.socket, start: bytes, byte: bytes, every: float, give_up: float) -> None:
    """Send ``start``, then ``byte`` every ``every`` seconds until the server closes the
    connection (``give_up`` seconds at most)."""
    began = time.monotonic()
    sock.sendall(start)
    while time.monotonic() - began < give_up:
        readable, _, _ = select.select([sock], [], [], every)
        try:
            if readable and sock.recv(1024) == b"":
                break
            sock.sendall(byte)
        except OSError:  # reset: closed while we were sending
            break


def test_past_the_connection_limit_a_connection_is_reset_at_once_and_the_probes_still_answer(
    cluster: DevCluster, tmp_path: Path
) -> None:
    with scheduler(cluster, tmp_path) as running:
        assert running.metrics_url is not None and running.health_url is not None
        held = [connect(running.metrics_url) for _ in range(DEFAULT_LIMITS.max_connections)]
        try:
            # A reset, not the FIN of a deadline: the server refused it at accept.
            assert fate_of_new(running.metrics_url, within=30) == "reset"
            assert http_get(running.health_url, "/readyz") == 200
            assert running.metrics.value(DROPPED, {"reason": "limit"}) == 1
        finally:
            for sock in held:
                sock.close()
        wait_until(lambda: serves(running.metrics_url or "", "/metrics"), what="the metrics port to serve again")


def test_a_silent_connection_is_closed_after_the_idle_timeout() -> None:
    server, drops = start(Limits(idle_timeout=0.5, request_timeout=60))
    try:
        began = time.monotonic()  # before connect: the server's clock for it starts later
        with connect(server.url) as sock:
            assert fate(sock, within=30) == "closed"
        assert time.monotonic() - began >= 0.5
        wait_until(lambda: drops.count("timeout") == 1, what="the drop to be counted")
    finally:
        server.close()


@pytest.mark.parametrize("secure", [False, True], ids=["http", "https"])
def test_a_slowloris_is_cut_off_at_the_request_timeout_however_often_it_sends(secure: bool) -> None:
    """A byte every 0.1 s keeps the idle timeout (30 s) from ever firing; the request deadline
    (1 s from accept to a whole request head, TLS handshake included) cuts it all the same."""
    server, drops = start(Limits(idle_timeout=30, request_timeout=1.0), secure=secure)
    # Plain: a request head that never ends. TLS: a ClientHello record that never ends.
    start_bytes, byte = (b"\x16\x03\x01\x02\x00", b"\x01") if secure else (b"GET /metrics HTTP/1.1\r\nX-Slow: ", b"a")
    try:
        began = time.monotonic()  # before connect: the server's clock for it starts later
        with connect(server.url) as sock:
            dribble(sock, start_bytes, byte, every=0.1, give_up=30)
        assert 1.0 <= time.monotonic() - began < 30
        wait_until(lambda: drops.count("timeout") == 1, what="the drop to be counted")
    finally:
        server.close()


@pytest.mark.parametrize("secure", [False, True], ids=["http", "https"])
def test_hundreds_of_idle_connections_take_no_thread_and_are_refused_past_the_limit(secure: bool) -> None:
    # Deadlines far off: the held connections must still be held when the last one connects.
    server, drops = start(Limits(idle_timeout=120, request_timeout=120), secure=secure)
    running = set(threading.enumerate())
    clients = 300
    socks: list[socket.socket] = []
    try:
        for _ in range(clients):
            try:
                socks.append(connect(server.url))
            except ConnectionResetError:
                pass  # refused so fast that the reset met the handshake's last step
        refused = clients - DEFAULT_LIMITS.max_connections
        wait_until(lambda: drops.count("limit") == refused, what="the connections past the limit to be refused")
        assert [t.name for t in threading.enumerate() if t not in running] == []
        for sock in socks:
            sock.close()
        wait_until(lambda: _healthy(server), what="the port to serve again")
    finally:
        for sock in socks:
            sock.close()
        server.close()


def _healthy(server: MetricsServer) -> bool:
    if not server.url.startswith("https"):
        return serves(server.url, "/healthz")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with connect(server.url) as raw, context.wrap_socket(raw) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def test_a_request_head_past_the_size_limit_is_refused_with_431() -> None:
    server, drops = start()
    try:
        with connect(server.url) as sock:
            headers = "".join(f"X-Filler-{i}: {'x' * 200}\r\n" for i in range(50))  # about 11 KB
            sock.sendall(f"GET /metrics HTTP/1.1\r\n{headers}\r\n".encode())
            sock.settimeout(10)
            assert sock.recv(64).startswith(b"HTTP/1.1 431 ")
        assert drops.count("too_large") == 1
    finally:
        server.close()


def test_a_request_arriving_in_pieces_within_the_limits_is_answered() -> None:
    server, _ = start()
    try:
        with connect(server.url) as sock:
            for piece in (b"GET /hea", b"lthz HTTP/1.1\r\nHo", b"st: x\r\n", b"\r\n"):
                sock.sendall(piece)
                time.sleep(0.05)
            sock.settimeout(10)
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        assert answer.split(b" ", 2)[1] == b"200" and answer.endswith(b"\r\n\r\nok\n")
    finally:
        server.close()
