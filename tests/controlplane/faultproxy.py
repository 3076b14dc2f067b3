"""A fault-injecting reverse proxy in front of kube-apiserver: the dev cluster's faults on a real server.

A test hands the scheduler a kubeconfig whose server is the proxy (same CA, the scheduler's own
token); every request goes through :class:`FaultProxy` to kube-apiserver, and the dev cluster's
fault engine (:class:`kruntimes.devcluster.faults.Faults`, the very same rules, counts, seeded
probabilities and verdicts) decides what happens to it on the way:

- ``conflict`` / ``error``: answered with the injected ``Status`` (409, 500, 503, 429 with
  ``Retry-After``...) and never forwarded, so nothing changes on the server;
- ``latency``: held that long, then forwarded;
- ``lose-response``: forwarded, the server's answer read to its end (the write has landed, or the
  server refused it), then, for a 2xx answer, the client's connection is closed unanswered or
  answered with the rule's error instead; a refusal (409, 422...) is passed on as it is;
- ``expire-watch``: a watch is answered, without forwarding, with a 200 stream holding one ERROR
  event of a 410 ``Expired`` Status, as the API server reports a too-old resourceVersion;
- ``drop_watches``: every open relayed watch (of a resource) ends now: the server side of the
  stream is cut, and the client's stream gets its terminating chunk (or, with ``abort``, its
  connection is cut too).

With ``record_writes``, the proxy also keeps every write the server accepted (2xx) with the object
it answered, whatever the client got (a lost answer, a client gone meanwhile): the answer is read
whole before anything is passed on. :meth:`FaultProxy.writes` returns them; the answered object's
``resourceVersion`` places the write in the server's commit order, the User-Agent names the writer
(``tests/chaos/recorded.py`` makes a write history of them).

The proxy adds no credential: the client's ``Authorization`` header goes through untouched, so the
API server authenticates and authorizes the client itself (a ServiceAccount under deploy/ RBAC).

How it is built: one asyncio event loop on one thread serves every connection (TLS on loopback with
a certificate the control plane's CA signed). Each client connection is paired with one
kube-apiserver connection of its own, opened on its first request and kept alive with it; requests
are read whole, answers relayed as they arrive, a chunked answer chunk by chunk (a watch event
reaches the client as soon as the server sent it). :meth:`FaultProxy.stop` closes the listener,
cuts every connection, waits for every connection's task and closes the loop: no thread or socket
outlives it. Protocol upgrades (exec, attach, port-forward) are refused with a 501.
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import http
import json
import logging
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, final
from urllib.parse import parse_qs, unquote, urlsplit

from kruntimes.devcluster import errors
from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.faults import WRITE_VERBS, Faults, RequestInfo, Verdict, names_resource

from .server import kubeconfig_text

if TYPE_CHECKING:
    from .server import ControlPlane

log = logging.getLogger(__name__)

LINE_LIMIT: Final = 64 * 1024
"""Longest request, status, header or chunk-size line (kube-apiserver's own header limit is 1 MiB in
all; no client of ours comes near this)."""
MAX_HEADERS: Final = 256
MAX_BODY: Final = 64 * 1024 * 1024
"""Largest request body read (kube-apiserver refuses more than 3 MiB itself)."""
CONNECT_TIMEOUT: Final = 10.0
HISTORY: Final = 10_000
"""Exchanges remembered (the oldest are forgotten first)."""
_NAMESPACE_SUBRESOURCES: Final = frozenset(("status", "finalize"))
_TRUE: Final = frozenset(("1", "t", "true"))
"""``strconv.ParseBool``'s true values, lower-cased: what kube-apiserver reads ``watch=`` with."""
_HOP_BY_HOP: Final = frozenset(("content-length", "transfer-encoding", "expect", "keep-alive", "proxy-connection", "te", "trailer"))
"""Request headers not passed on as they came: the body is sent whole with its own Content-Length."""


class _Malformed(Exception):
    """A message that is not HTTP/1.1 as this proxy relays it: the connection is closed."""


@final
@dataclass(frozen=True, slots=True)
class Exchange:
    """One request the proxy received, and what became of it."""

    method: str
    path: str
    info: RequestInfo | None
    """None for a path that names no resource (discovery, /version, health)."""
    forwarded_status: int
    """What kube-apiserver answered; 0 when the request was not forwarded or got no answer."""
    answered_status: int
    """What the client was answered; 0 when its connection was closed unanswered."""


@final
@dataclass(frozen=True, slots=True)
class RecordedWrite:
    """A write kube-apiserver accepted (2xx), as ``FaultProxy(record_writes=True)`` keeps it."""

    sent: int
    """``time.monotonic_ns()`` when the proxy passed the request on to the server."""
    time: float
    """Wall-clock time when the server's answer arrived (just after the write committed)."""
    method: str
    info: RequestInfo
    status: int
    """What the server answered."""
    answered: int
    """What the client got: ``status``, an injected error's code, or 0 (closed unanswered)."""
    object: Mapping[str, Any] | None
    """The object the server answered (for a delete: the object at its deletion's version);
    ``None`` when the answer was not a JSON object."""


@dataclass(slots=True)
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes = b""

    def header(self, name: str) -> str:
        return _header(self.headers, name)

    @property
    def closes(self) -> bool:
        return "close" in _tokens(self.header("connection"))

    def head_for_upstream(self) -> bytes:
        lines = [f"{self.method} {self.target} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in self.headers if name.lower() not in _HOP_BY_HOP]
        if self.body or self.method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@dataclass(eq=False, slots=True)
class _Link:
    """One client connection and the kube-apiserver connection its requests go over."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    up_reader: asyncio.StreamReader | None = None
    up_writer: asyncio.StreamWriter | None = None


@dataclass(eq=False, slots=True)
class _Watch:
    info: RequestInfo
    link: _Link
    dropped: Literal["", "end", "abort"] = ""


Framing = Literal["none", "length", "chunked", "eof"]


def _header(headers: list[tuple[str, str]], name: str) -> str:
    wanted = name.lower()
    return next((value for key, value in headers if key.lower() == wanted), "")


def _tokens(value: str) -> set[str]:
    return {token.strip().lower() for token in value.split(",") if token.strip()}


def request_info(method: str, path: str, query: dict[str, list[str]], user_agent: str) -> RequestInfo | None:
    """The request as kube-apiserver's authorizer (and the dev cluster's router) sees it; None for a
    path that names no resource. A namespace's own ``status``/``finalize`` is the namespace's
    subresource, not a resource in it, as the server's RequestInfoFactory reads it."""
    parts = path.strip("/").split("/")
    if len(parts) >= 3 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in _NAMESPACE_SUBRESOURCES:
        namespace, rest = rest[1], rest[2:]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    collection = not name
    if method in ("GET", "HEAD"):
        watching = (query.get("watch") or [""])[0].lower() in _TRUE
        verb = ("watch" if watching else "list") if collection else "get"
    elif method == "POST":
        verb = "create"
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "deletecollection" if collection else "delete"
    else:
        return None
    return RequestInfo(verb, group, rest[0], subresource, namespace, name, user_agent)


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, list[tuple[str, str]]] | None:
    """A start line and its headers; None at a clean end of the connection before the start line."""
    line = await reader.readline()
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise _Malformed("the connection ended inside a start line")
    headers: list[tuple[str, str]] = []
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n"):
            return line.decode("latin-1").rstrip("\r\n"), headers
        if not raw.endswith(b"\n"):
            raise _Malformed("the connection ended inside the headers")
        name, colon, value = raw.decode("latin-1").partition(":")
        if not colon or not name.strip() or len(headers) >= MAX_HEADERS:
            raise _Malformed("a malformed header, or too many")
        headers.append((name.strip(), value.strip()))


async def _read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readline()
        if not size_line.endswith(b"\n"):
            raise _Malformed("the connection ended inside a chunk size")
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            raise _Malformed("a malformed chunk size") from None
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers: none that matter here
            return b"".join(chunks)
        total += size
        if total > limit:
            raise _Malformed("a request body over the limit")
        chunks.append((await reader.readexactly(size + 2))[:-2])


def _framing(method: str, status: int, headers: list[tuple[str, str]]) -> tuple[Framing, int]:
    if method == "HEAD" or 100 <= status < 200 or status in (204, 304):
        return "none", 0
    if "chunked" in _tokens(_header(headers, "transfer-encoding")):
        return "chunked", 0
    length = _header(headers, "content-length")
    if length:
        try:
            return "length", int(length)
        except ValueError:
            raise _Malformed("a malformed Content-Length") from None
    return "eof", 0


async def _relay_chunked(source: asyncio.StreamReader, sink: asyncio.StreamWriter | None) -> None:
    """Pass each chunk on as soon as it is whole (``sink`` None: read and drop); returns after the last."""
    while True:
        size_line = await source.readline()
        if not size_line.endswith(b"\n"):
            raise _Malformed("the server's stream ended inside a chunk size")
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            raise _Malformed("a malformed chunk size from the server") from None
        if size == 0:
            rest = [size_line]
            while True:
                trailer = await source.readline()
                if not trailer.endswith(b"\n"):
                    raise _Malformed("the server's stream ended inside its trailer")
                rest.append(trailer)
                if trailer in (b"\r\n", b"\n"):
                    break
            if sink is not None:
                sink.write(b"".join(rest))
                await sink.drain()
            return
        data = await source.readexactly(size + 2)
        if sink is not None:
            sink.write(size_line + data)
            await sink.drain()


async def _relay_body(source: asyncio.StreamReader, sink: asyncio.StreamWriter | None, framing: Framing, length: int) -> None:
    if framing == "chunked":
        await _relay_chunked(source, sink)
        return
    remaining = length
    while framing == "eof" or remaining > 0:
        data = await source.read(65536 if framing == "eof" else min(remaining, 65536))
        if not data:
            if framing == "eof":
                return
            raise _Malformed("the server's answer ended early")
        remaining -= len(data)
        if sink is not None:
            sink.write(data)
            await sink.drain()


async def _read_body(source: asyncio.StreamReader, framing: Framing, length: int) -> tuple[bytes, bytes]:
    """A whole answer body: (the bytes as framed, to pass on; the payload, chunks joined)."""
    if framing == "none":
        return b"", b""
    if framing == "length":
        data = await source.readexactly(length)
        return data, data
    if framing == "eof":
        data = await source.read()
        return data, data
    raw: list[bytes] = []
    payload: list[bytes] = []
    while True:
        size_line = await source.readline()
        if not size_line.endswith(b"\n"):
            raise _Malformed("the server's answer ended inside a chunk size")
        raw.append(size_line)
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            raise _Malformed("a malformed chunk size from the server") from None
        if size == 0:
            while True:
                trailer = await source.readline()
                if not trailer.endswith(b"\n"):
                    raise _Malformed("the server's answer ended inside its trailer")
                raw.append(trailer)
                if trailer in (b"\r\n", b"\n"):
                    return b"".join(raw), b"".join(payload)
        data = await source.readexactly(size + 2)
        raw.append(data)
        payload.append(data[:-2])


def _answered_object(headers: list[tuple[str, str]], payload: bytes) -> Mapping[str, Any] | None:
    try:
        if _header(headers, "content-encoding").lower() == "gzip":
            payload = gzip.decompress(payload)
        parsed = json.loads(payload)
    except (ValueError, OSError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _status_head(code: int, headers: list[tuple[str, str]]) -> bytes:
    try:
        phrase = http.HTTPStatus(code).phrase
    except ValueError:
        phrase = "Unknown"
    lines = [f"HTTP/1.1 {code} {phrase}", *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _status_answer(error: ApiError) -> bytes:
    body = json.dumps(error.status(), separators=(",", ":")).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), ("Cache-Control", "no-cache, private")]
    if error.retry_after is not None:
        headers.append(("Retry-After", str(error.retry_after)))
    return _status_head(error.code, headers) + body


def _expired_stream(resource_version: str) -> bytes:
    """A watch answered as the API server answers a too-old resourceVersion: 200, one ERROR event."""
    status = errors.expired(f"too old resource version: {resource_version or 0} (injected by dev-cluster fault)").status()
    event = json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"
    head = _status_head(200, [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked"), ("Cache-Control", "no-cache, private")])
    return head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event)


def _status_of(start: str) -> int:
    parts = start.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise _Malformed(f"not an HTTP/1.x status line: {start[:80]!r}")
    return int(parts[1])


def _close(writer: asyncio.StreamWriter | None) -> None:
    """Cut a connection now (its socket is closed on the loop's next iteration)."""
    if writer is not None:
        writer.transport.abort()


async def _finish(writer: asyncio.StreamWriter) -> None:
    """Close a client connection after what was written to it has left (TLS close_notify, then FIN)."""
    try:
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), 5.0)
    except (ConnectionError, ssl.SSLError, TimeoutError, OSError):
        pass
    finally:
        writer.transport.abort()


@final
class FaultProxy:
    """A TLS reverse proxy on loopback in front of one kube-apiserver, applying :attr:`faults` to what passes."""

    def __init__(self, upstream: str, ca_pem: bytes, certificate: Path, key: Path, *, seed: int | None = None,
                 record_writes: bool = False) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "https" or parts.hostname is None or parts.port is None:
            raise ValueError(f"the upstream must be https://HOST:PORT, not {upstream!r}")
        self._upstream_host: str = parts.hostname
        self._upstream_port: int = parts.port
        self._ca_pem = ca_pem
        self._serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._serving.load_cert_chain(certificate, key)
        self._serving.set_alpn_protocols(["http/1.1"])  # relayed as HTTP/1.1 only: a Go client offering h2 falls back
        self._client = ssl.create_default_context(cadata=ca_pem.decode())
        self._client.set_alpn_protocols(["http/1.1"])
        self.faults = Faults(self, seed=seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._port = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._links: set[_Link] = set()
        self._watches: set[_Watch] = set()
        self._watches_lock = threading.Lock()
        """``_watches`` changes on the loop's thread and is counted from a test's."""
        self._history: collections.deque[Exchange] = collections.deque(maxlen=HISTORY)
        self._history_lock = threading.Lock()
        self._record_writes = record_writes
        self._writes: list[RecordedWrite] = []
        """Appended on the loop's thread, copied under ``_history_lock`` from a test's."""
        self.failures: list[str] = []
        """What went wrong in the proxy itself (a bug, not a client or server going away); a test
        fixture asserts it stays empty."""

    @classmethod
    def before(cls, plane: ControlPlane, *, seed: int | None = None, record_writes: bool = False) -> FaultProxy:
        """A proxy for ``plane``, serving the certificate its CA signed for one."""
        certificate, key = plane.proxy_credentials
        return cls(plane.server, plane.ca_pem, certificate, key, seed=seed, record_writes=record_writes)

    # -- what a test uses ----------------------------------------------------------------------------

    @property
    def server(self) -> str:
        """The address to put in a kubeconfig instead of the API server's."""
        return f"https://127.0.0.1:{self._port}"

    def kubeconfig(self, path: Path, token: str, *, user: str = "proxied", namespace: str = "default") -> Path:
        """A kubeconfig for this proxy with ``token`` (the caller's own: the proxy adds none)."""
        path.write_text(kubeconfig_text(self.server, self._ca_pem, token, user=user, namespace=namespace))
        path.chmod(0o600)
        return path

    def history(self) -> list[Exchange]:
        """The requests received so far (the last :data:`HISTORY`), oldest first."""
        with self._history_lock:
            return list(self._history)

    def writes(self) -> list[RecordedWrite]:
        """Every write the server accepted so far (``record_writes``), in the order the answers arrived."""
        with self._history_lock:
            return list(self._writes)

    def open_watches(self, resource: str | None = None) -> int:
        """Watch streams being relayed now (of ``resource``: ``plural`` or ``plural.group``)."""
        wanted = frozenset((resource,)) if resource else frozenset()
        with self._watches_lock:
            return sum(1 for w in self._watches if names_resource(wanted, w.info.group, w.info.resource))

    def close_watches(self, wanted: frozenset[str], *, abort: bool) -> int:
        """``Faults.drop_watches``: cut the server side of each chosen stream; its relay ends the client's."""
        loop = self._loop
        if loop is None:
            return 0
        if threading.current_thread() is self._thread:
            raise RuntimeError("close_watches waits for the proxy's loop: call it from another thread")
        return asyncio.run_coroutine_threadsafe(self._close_watches(wanted, abort), loop).result(timeout=30)

    # -- life cycle ---------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(self._loop_error)
        thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            self._server = asyncio.run_coroutine_threadsafe(self._listen(), loop).result(timeout=30)
        except BaseException:
            self.stop()
            raise
        self._port = int(self._server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Stop listening, cut every connection (an open watch breaks), join the loop's thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            if thread.is_alive():
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()
            self._loop = self._thread = self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None) -> None:
        self.stop()

    # -- the loop's side ----------------------------------------------------------------------------

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        """Broken client connections (a TLS handshake cut short, a reset) are normal here; anything else is a failure."""
        if isinstance(context.get("exception"), (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
            return
        self.failures.append(str(context.get("message") or context))
        loop.default_exception_handler(context)

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._serving, limit=LINE_LIMIT)

    async def _shutdown(self) -> None:
        server = self._server
        self._closing = True
        if server is not None:
            server.close()
        while self._tasks:  # again if a connection's TLS handshake ended meanwhile
            for link in list(self._links):
                _close(link.writer)
                _close(link.up_writer)
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0)
        if server is not None:
            await server.wait_closed()
        for _ in range(3):  # aborted transports close their sockets on the loop's next iterations
            await asyncio.sleep(0)

    async def _close_watches(self, wanted: frozenset[str], abort: bool) -> int:
        with self._watches_lock:
            chosen = [w for w in self._watches if names_resource(wanted, w.info.group, w.info.resource)]
        for watch in chosen:
            watch.dropped = "abort" if abort else "end"
            _close(watch.link.up_writer)
        return len(chosen)

    def _record(self, request: _Request, info: RequestInfo | None, forwarded: int, answered: int) -> None:
        with self._history_lock:
            self._history.append(Exchange(request.method, urlsplit(request.target).path, info, forwarded, answered))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        link = _Link(reader, writer)
        if self._closing:
            _close(writer)
            return
        self._tasks.add(task)
        self._links.add(link)
        try:
            await self._converse(link)
        except asyncio.CancelledError:
            pass  # stop(): the task must not end cancelled (asyncio 3.11 logs such a connection task as an error)
        finally:
            _close(link.up_writer)
            _close(writer)
            self._links.discard(link)
            self._tasks.discard(task)

    async def _converse(self, link: _Link) -> None:
        try:
            while await self._exchange(link):
                pass
        except (_Malformed, ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError, ValueError, OSError):
            return  # a client or the server went away, or broke the protocol: the connection is cut
        except Exception as problem:
            log.exception("fault proxy: a connection failed")
            self.failures.append(f"{type(problem).__name__}: {problem}")
            return
        _close(link.up_writer)
        await _finish(link.writer)

    async def _read_request(self, link: _Link) -> _Request | None:
        head = await _read_head(link.reader)
        if head is None:
            return None
        start, headers = head
        parts = start.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _Malformed(f"not an HTTP/1.x request line: {start[:80]!r}")
        request = _Request(parts[0], parts[1], headers)
        if request.header("expect").lower() == "100-continue":
            link.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await link.writer.drain()
        if "chunked" in _tokens(request.header("transfer-encoding")):
            request.body = await _read_chunked(link.reader, MAX_BODY)
        elif request.header("content-length"):
            length = int(request.header("content-length"))
            if not 0 <= length <= MAX_BODY:
                raise _Malformed("a request body over the limit")
            request.body = await link.reader.readexactly(length)
        return request

    async def _upstream(self, link: _Link) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The link's server connection; a new one if there is none or the server closed it while idle."""
        if link.up_reader is not None and link.up_writer is not None and not link.up_reader.at_eof() and not link.up_writer.is_closing():
            return link.up_reader, link.up_writer
        _close(link.up_writer)
        link.up_reader = link.up_writer = None
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self._upstream_host, self._upstream_port, ssl=self._client,
                                    server_hostname=self._upstream_host, limit=LINE_LIMIT),
            CONNECT_TIMEOUT,
        )
        link.up_reader, link.up_writer = reader, writer
        return reader, writer

    def _drop_upstream(self, link: _Link) -> None:
        _close(link.up_writer)
        link.up_reader = link.up_writer = None

    async def _answer(self, link: _Link, data: bytes) -> None:
        link.writer.write(data)
        await link.writer.drain()

    async def _exchange(self, link: _Link) -> bool:
        """Serve one request; whether the client's connection stays open for another."""
        request = await self._read_request(link)
        if request is None:
            return False
        keep = not request.closes
        if request.header("upgrade"):
            refusal = ApiError("NotImplemented", "the fault proxy does not relay protocol upgrades", code=501)
            await self._answer(link, _status_answer(refusal))
            self._record(request, None, 0, 501)
            return keep
        url = urlsplit(request.target)
        query = parse_qs(url.query, keep_blank_values=True)
        info = request_info(request.method, unquote(url.path), query, request.header("user-agent"))
        verdict = self.faults.check(info) if info is not None else Verdict()
        if verdict.latency > 0:
            await asyncio.sleep(verdict.latency)
        if verdict.error is not None:
            await self._answer(link, _status_answer(verdict.error))
            self._record(request, info, 0, verdict.error.code)
            return keep
        if info is not None and verdict.expire_watch and info.verb == "watch":
            await self._answer(link, _expired_stream((query.get("resourceVersion") or [""])[0]))
            self._record(request, info, 0, 200)
            return keep
        lost = verdict if info is not None and verdict.after_commit and info.verb in WRITE_VERBS else None
        try:
            up_reader, up_writer = await self._upstream(link)
        except (OSError, TimeoutError, ssl.SSLError) as problem:
            unreachable = ApiError("ServiceUnavailable", f"the fault proxy cannot reach the API server: {problem}")
            await self._answer(link, _status_answer(unreachable))
            self._record(request, info, 0, 503)
            return keep
        sent = time.monotonic_ns()
        up_writer.write(request.head_for_upstream() + request.body)
        await up_writer.drain()
        head = await _read_head(up_reader)
        while head is not None and 100 <= _status_of(head[0]) < 200:
            head = await _read_head(up_reader)  # interim answers: the body was sent whole already
        if head is None:  # the server closed without answering: so does the proxy
            self._record(request, info, 0, 0)
            return False
        arrived = time.time()
        start, headers = head
        status = _status_of(start)
        framing, length = _framing(request.method, status, headers)
        keep = keep and framing != "eof" and "close" not in _tokens(_header(headers, "connection"))
        lost_answer = lost is not None and 200 <= status < 300
        body: bytes | None = None
        if self._record_writes and info is not None and info.verb in WRITE_VERBS and 200 <= status < 300:
            # read whole and kept before the client gets anything: a client gone meanwhile loses
            # its answer, never the record of a write that committed
            body, payload = await _read_body(up_reader, framing, length)
            answered = (0 if lost.error_after_commit is None else lost.error_after_commit.code) if lost is not None else status
            with self._history_lock:
                self._writes.append(RecordedWrite(sent, arrived, request.method, info, status, answered, _answered_object(headers, payload)))
        if lost is not None and lost_answer:
            if body is None:
                await _relay_body(up_reader, None, framing, length)
            if not keep:
                self._drop_upstream(link)
            if lost.error_after_commit is None:
                self._record(request, info, status, 0)
                return False  # closed unanswered
            await self._answer(link, _status_answer(lost.error_after_commit))
            self._record(request, info, status, lost.error_after_commit.code)
            return keep
        link.writer.write(_status_head(status, headers))
        self._record(request, info, status, status)
        if body is not None:
            link.writer.write(body)
            await link.writer.drain()
            if not keep:
                self._drop_upstream(link)
            return keep
        if info is not None and info.verb == "watch" and framing == "chunked":
            return await self._relay_watch(link, info, up_reader) and keep
        await link.writer.drain()
        await _relay_body(up_reader, link.writer, framing, length)
        if not keep:
            self._drop_upstream(link)
        return keep

    async def _relay_watch(self, link: _Link, info: RequestInfo, up_reader: asyncio.StreamReader) -> bool:
        """Relay a watch stream until it ends, the client leaves, or the stream is dropped."""
        watch = _Watch(info, link)
        with self._watches_lock:
            self._watches.add(watch)
        relay = asyncio.ensure_future(_relay_chunked(up_reader, link.writer))
        gone = asyncio.ensure_future(link.reader.read(1))  # a client sends nothing on a watch: data or EOF means it left
        try:
            await link.writer.drain()
            done, _ = await asyncio.wait((relay, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            with self._watches_lock:
                self._watches.discard(watch)
            for task in (relay, gone):
                task.cancel()
            await asyncio.gather(relay, gone, return_exceptions=True)
        if relay in done and not relay.cancelled() and relay.exception() is None:
            return True
        self._drop_upstream(link)
        if gone in done or watch.dropped != "end":
            return False  # the client left, the stream was aborted, or the server cut it: cut the client's too
        await self._answer(link, b"0\r\n\r\n")
        return True


