"""The client's own HTTP/1.1 framing (kubeclient.wire), byte for byte against a scripted socket server:
kept connections, every way an answer is framed, and when a request is (never) sent twice."""

from __future__ import annotations

import socket
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes.client import Configuration

from kruntimes.kubeclient.kube import Kube, KubeError
from kruntimes.kubeclient.secureserving import self_signed_pem
from kruntimes.kubeclient.wire import host_header
from tests.polling import wait_until

Script = Callable[[socket.socket, bytes], bool]
"""Given a connection and one request read from it, answer (or not); ``False`` closes the connection."""


@dataclass
class Server:
    """A loopback server that reads whole requests and answers each by ``script``."""

    script: Script
    tls: ssl.SSLContext | None = None
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    closed: int = 0
    sock: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))

    def __post_init__(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                conn.close()
                return
        self.connections += 1
        reader = conn.makefile("rb")
        try:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = next(
                    (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
                    0,
                )
                request = head + reader.read(length)
                self.requests.append(request)
                if not self.script(conn, request):
                    return
        except OSError:
            return
        finally:
            # The file object holds the socket open past ``conn.close()``: close both, or the
            # count below would say "closed" while the client could still send on it.
            reader.close()
            conn.close()
            self.closed += 1

    def close(self) -> None:
        self.sock.close()


def answer(body: bytes = b'{"kind":"Status"}', status: str = "200 OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body) + extra + b"\r\n" + body


def ok(conn: socket.socket, request: bytes) -> bool:
    conn.sendall(answer(b'{"n":%d}' % len(request)))
    return True


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(script: Script, tls: ssl.SSLContext | None = None) -> Server:
        server = Server(script, tls)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def client(url: str, *, timeout: float = 10, ca: Path | None = None, token: str | None = None) -> Kube:
    configuration = Configuration(host=url)
    if ca is not None:
        configuration.ssl_ca_cert = str(ca)
    if token is not None:
        configuration.api_key = {"authorization": f"Bearer {token}"}
    return Kube(configuration, request_timeout=timeout)


def test_requests_of_one_thread_share_one_kept_connection(serve: Callable[..., Server]) -> None:
    server = serve(ok)
    kube = client(server.url)
    for i in range(5):
        assert kube.patch("/x", b'{"i":%d}' % i).unwrap()["n"] != 0
    assert server.connections == 1 and len(server.requests) == 5
    first = server.requests[0]
    assert first.startswith(b"PATCH /x HTTP/1.1\r\n")
    assert b"\r\nHost: 127.0.0.1:" in first and b"\r\nContent-Length: 7\r\n" in first and first.endswith(b'{"i":0}')
    assert b"\r\nContent-Type: application/merge-patch+json\r\n" in first and b"\r\nUser-Agent: kruntimes-scheduler\r\n" in first


def test_every_framing_of_an_answer_is_read_whole(serve: Callable[..., Server]) -> None:
    answers = iter([
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{\"a\"\r\n4\r\n:1}\n\r\n0\r\nTrailer: x\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b'{"b":2}'),
        answer(b'{"c":3}', extra=b"Connection: close\r\n"),
    ])

    def script(conn: socket.socket, request: bytes) -> bool:
        data = next(answers)
        conn.sendall(data)
        return b"Connection: close" not in data

    server = serve(script)
    kube = client(server.url)
    assert kube.get("/a").unwrap() == {"a": 1}
    assert kube.get("/b").unwrap() == {"b": 2}
    assert kube.get("/c").unwrap() == {"c": 3}
    assert server.connections == 1


def test_an_answer_framed_by_the_end_of_the_connection_is_read_to_the_end(serve: Callable[..., Server]) -> None:
    def script(conn: socket.socket, request: bytes) -> bool:
        conn.sendall(b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"old":true}')
        return False

    server = serve(script)
    kube = client(server.url)
    assert kube.get("/x").unwrap() == {"old": True}
    assert kube.get("/x").unwrap() == {"old": True}, "the next request opens a new connection"
    assert server.connections == 2


def test_a_connection_the_server_closed_while_idle_is_replaced_before_sending(serve: Callable[..., Server]) -> None:
    def script(conn: socket.socket, request: bytes) -> bool:
        conn.sendall(answer())
        return False  # answers without "Connection: close", then closes anyway (an idle timeout)

    server = serve(script)
    kube = client(server.url)
    for _ in range(3):
        assert kube.create("/x", {"a": 1}).unwrap() == {"kind": "Status"}
        wait_until(lambda: server.closed == len(server.requests))  # closed while idle, before the next request
    assert len(server.requests) == 3 and server.connections == 3, "each POST sent exactly once"


def test_a_write_whose_answer_is_lost_is_never_sent_again_and_reads_as_possibly_applied(serve: Callable[..., Server]) -> None:
    def script(conn: socket.socket, request: bytes) -> bool:
        if request.startswith(b"PATCH /lost"):
            return False  # applied, then the connection breaks before the answer
        conn.sendall(answer())
        return True

    server = serve(script)
    kube = client(server.url)
    assert kube.get("/warm").unwrap()  # the PATCH goes out on a kept connection
    failure = kube.patch("/lost", b"{}").failure()
    assert failure.kind == "transport" and failure.retriable
    assert sum(r.startswith(b"PATCH /lost") for r in server.requests) == 1


def test_a_read_whose_kept_connection_ends_before_an_answer_is_asked_once_more(serve: Callable[..., Server]) -> None:
    dropped: list[bool] = []

    def script(conn: socket.socket, request: bytes) -> bool:
        if request.startswith(b"GET /flaky") and not dropped:
            dropped.append(True)
            return False
        conn.sendall(answer(b'{"ok":1}'))
        return True

    server = serve(script)
    kube = client(server.url)
    assert kube.get("/warm").unwrap()
    assert kube.get("/flaky").unwrap() == {"ok": 1}
    assert sum(r.startswith(b"GET /flaky") for r in server.requests) == 2


def test_no_server_is_unreachable_and_a_silent_one_times_out_as_transport(serve: Callable[..., Server]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    assert client(f"http://127.0.0.1:{port}").get("/x").failure().kind == "unreachable"
    silent = serve(lambda conn, request: (threading.Event().wait(5), True)[1])
    failure = client(silent.url, timeout=0.3).patch("/x", b"{}").failure()
    assert failure.kind == "transport"


def test_error_answers_keep_their_status_reason_and_retry_after(serve: Callable[..., Server]) -> None:
    def script(conn: socket.socket, request: bytes) -> bool:
        body = b'{"kind":"Status","code":429,"reason":"TooManyRequests","message":"slow down"}'
        conn.sendall(answer(body, "429 Too Many Requests", b"Retry-After: 3\r\n"))
        return True

    failure = client(serve(script).url).create("/x", {}).failure()
    assert (failure.kind, failure.status, failure.retry_after) == ("throttled", 429, 3.0)


def test_a_token_with_a_line_break_is_refused_before_anything_is_sent(serve: Callable[..., Server]) -> None:
    server = serve(ok)
    failure = client(server.url, token="abc\r\nX-Injected: 1").get("/x").failure()
    assert failure.kind == "invalid" and not server.requests


def tls_server(directory: Path) -> ssl.SSLContext:
    """A server context for a certificate of 127.0.0.1, written to ``directory/cert.pem``."""
    cert, key = self_signed_pem(("127.0.0.1",))
    (directory / "cert.pem").write_bytes(cert)
    (directory / "key.pem").write_bytes(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return context


def test_tls_trusts_the_kubeconfigs_ca_and_nothing_else(serve: Callable[..., Server], tmp_path: Path) -> None:
    context = tls_server(tmp_path)
    server = serve(ok, context)
    trusted = client(server.url, ca=tmp_path / "cert.pem")
    assert trusted.get("/x").unwrap()["n"] != 0
    assert trusted.get("/y").unwrap()["n"] != 0
    assert server.connections == 1
    with tempfile.NamedTemporaryFile(suffix=".pem") as other:
        other.write(self_signed_pem(("127.0.0.1",))[0])
        other.flush()
        failure = client(server.url, ca=Path(other.name)).get("/x").failure()
    assert failure.kind == "unreachable" and "certificate" in failure.message.lower()
    assert len(server.requests) == 2, "an untrusted server is never sent the request"


def test_the_host_header_names_the_port_only_when_it_is_not_the_default() -> None:
    assert host_header("api.example", 443, "https") == "api.example"
    assert host_header("api.example", 6443, "https") == "api.example:6443"
    assert host_header("10.0.0.1", 80, "http") == "10.0.0.1"
    assert host_header("fd00::1", 6443, "https") == "[fd00::1]:6443"


def test_a_thread_that_ends_takes_its_connection_with_it(serve: Callable[..., Server]) -> None:
    server = serve(ok)
    kube = client(server.url)
    for _ in range(3):  # e.g. the workers of three leadership terms, one after the other
        worker = threading.Thread(target=lambda: kube.get("/x").unwrap())
        worker.start()
        worker.join()
    assert server.connections == 3
    wait_until(lambda: server.closed == 3, what="each ended thread's connection closed")
    assert kube.get("/x").unwrap()["n"] != 0  # this thread's own connection is unaffected


def test_requests_after_close_open_a_new_connection(serve: Callable[..., Server]) -> None:
    server = serve(ok)
    kube = client(server.url)
    assert kube.get("/x").unwrap()["n"] != 0
    kube.close()  # as a scheduler's shutdown does while another thread may still send an Event
    assert kube.create("/y", {}).unwrap()["n"] != 0
    assert server.connections == 2 and sum(r.startswith(b"POST /y") for r in server.requests) == 1


# --- watches: an answer read as it arrives, on a connection of its own ---

EVENT = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"%d"}}}\n'


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def streaming(head: bytes, parts: list[bytes], *, then: Callable[[socket.socket], object] = lambda conn: None) -> Script:
    def script(conn: socket.socket, request: bytes) -> bool:
        conn.sendall(head)
        for part in parts:
            conn.sendall(part)
        then(conn)
        return False

    return script


CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize(
    "head, parts",
    [
        pytest.param(CHUNKED, [chunk(EVENT % 1), chunk((EVENT % 2)[:9]), chunk((EVENT % 2)[9:]), b"0\r\n\r\n"], id="chunked"),
        pytest.param(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", [EVENT % 1, EVENT % 2], id="to-the-end"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (2 * len(EVENT % 1)), [EVENT % 1, EVENT % 2], id="length"),
    ],
)
def test_a_watch_reads_every_framing_of_its_stream(serve: Callable[..., Server], head: bytes, parts: list[bytes]) -> None:
    server = serve(streaming(head, parts))
    kube = client(server.url)
    assert [event.resource_version for event in kube.watch("/runs", "0", timeout_seconds=5)] == ["1", "2"]
    request = server.requests[0]
    assert request.startswith(b"GET /runs?allowWatchBookmarks=true&resourceVersion=0&timeoutSeconds=5&watch=true HTTP/1.1\r\n")
    assert b"\r\nAccept: application/json\r\n" in request


def test_a_watch_stream_cut_inside_a_chunk_is_a_transport_error_after_the_events_before_it(serve: Callable[..., Server]) -> None:
    server = serve(streaming(CHUNKED, [chunk(EVENT % 1), b"40\r\n" + (EVENT % 2)[:10]]))
    seen: list[str] = []
    with pytest.raises(KubeError) as raised:
        for event in client(server.url).watch("/runs", "0"):
            seen.append(event.resource_version)
    assert seen == ["1"] and raised.value.error.kind == "transport"


def test_a_watch_without_its_closing_chunk_is_a_transport_error(serve: Callable[..., Server]) -> None:
    server = serve(streaming(CHUNKED, [chunk(EVENT % 1)]))
    with pytest.raises(KubeError) as raised:
        list(client(server.url).watch("/runs", "0"))
    assert raised.value.error.kind == "transport"


def test_a_watch_refused_at_open_carries_the_servers_status(serve: Callable[..., Server]) -> None:
    body = b'{"kind":"Status","code":429,"reason":"TooManyRequests","message":"slow down"}'
    server = serve(streaming(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: %d\r\n\r\n" % len(body), [body]))
    with pytest.raises(KubeError) as raised:
        list(client(server.url).watch("/runs", "0"))
    assert (raised.value.error.kind, raised.value.error.retry_after) == ("throttled", 3.0)


def test_an_interrupted_watch_on_a_quiet_stream_ends_at_once_and_closes_its_connection(serve: Callable[..., Server]) -> None:
    quiet = threading.Event()
    server = serve(streaming(CHUNKED, [chunk(EVENT % 1)], then=lambda conn: quiet.wait(30)))
    stream = client(server.url).watch("/runs", "0", timeout_seconds=300)
    assert next(stream).resource_version == "1"
    ended = threading.Event()

    def drain() -> None:
        try:
            for _ in stream:
                pass
        except KubeError:
            pass
        ended.set()

    threading.Thread(target=drain, daemon=True).start()
    assert not ended.wait(0.2)  # blocked on the quiet stream
    stream.interrupt()
    assert ended.wait(5)
    quiet.set()
    wait_until(lambda: server.closed == 1, timeout=5)


def test_a_watch_over_tls_trusts_the_kubeconfigs_ca(serve: Callable[..., Server], tmp_path: Path) -> None:
    context = tls_server(tmp_path)
    server = serve(streaming(CHUNKED, [chunk(EVENT % 7), b"0\r\n\r\n"]), tls=context)
    assert [e.resource_version for e in client(server.url, ca=tmp_path / "cert.pem").watch("/runs", "0")] == ["7"]
    with pytest.raises(KubeError) as raised:
        list(client(server.url).watch("/runs", "0"))  # the system's trust store does not know this CA
    assert raised.value.error.kind == "unreachable" and "certificate" in raised.value.error.message.lower()
    assert len(server.requests) == 1, "an untrusted server is never sent the watch"
