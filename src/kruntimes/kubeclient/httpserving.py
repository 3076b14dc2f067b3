"""A small HTTP/1.1 server for a few GET paths that holds under abuse (the metrics and probe ports).

One thread (``metrics-http``) runs a selector over the listening socket and every open connection:
an idle or slow client costs a file descriptor and a few kilobytes, never a thread. Each
connection carries one request and is closed after its answer (``Connection: close``), so there is
no keep-alive state to bound. What a client can hold is bounded (``Limits``):

- ``max_connections`` open at once. One more is accepted and reset at once (``SO_LINGER`` 0):
  nothing is read or written, no TLS handshake is spent on it, so a refusal costs less than the
  connection cost its sender. A ``503`` was the alternative: over TLS it needs a handshake first
  (the CPU a flood would aim for), and written without reading the request it would mostly be lost
  to the reset that closing an unread socket sends anyway.
- ``request_timeout`` from accept to a complete request head, TLS handshake included, and again
  for writing the answer: a slowloris that sends a byte a second is cut there, however often it
  sends.
- ``idle_timeout`` without a byte moving either way.
- ``max_head_bytes`` for the request line and headers (bodies are never read): past it, ``431``.

Handlers run on the selector thread, or (``workers`` > 0, the ``--metrics-secure`` port, whose
handler may wait for a TokenReview) on that many threads of their own, which hand the answer
back to the selector thread to write. The listening socket's backlog is ``Limits.backlog``.

The standard library's ``ThreadingHTTPServer`` starts a thread per connection and reads without a
deadline; waitress (a selector with a worker pool) speaks no TLS and only times out silence, and
the asyncio servers (uvicorn, hypercorn) bring an event loop and a framework for three paths. This
module is the part of those the scheduler needs.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from queue import SimpleQueue
from typing import Final, Literal, TypeAlias

from kruntimes.kubeclient.threads import named_thread

log = logging.getLogger(__name__)

DropReason: TypeAlias = Literal["limit", "timeout", "too_large"]
"""Why a connection was closed without an ordinary answer: ``limit``, refused at accept because
``max_connections`` were open; ``timeout``, a deadline passed; ``too_large``, a request head over
``max_head_bytes`` (answered ``431``)."""

_RECV_BYTES: Final = 4096
_SEND_BYTES: Final = 65536
LINGER: Final = 1.0
"""Seconds an answered connection is drained (its unread input discarded) before it is closed:
closing with unread input resets the connection, and a reset can destroy the answer on its way."""
PAUSE: Final = 0.5
"""Seconds accepting stops when an accept fails for want of file descriptors."""
_ABORT: Final = struct.pack("ii", 1, 0)
"""``SO_LINGER`` on with a zero timeout: ``close`` resets the connection and keeps no state."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client can hold of the server (docs/operations.md, "The HTTP ports under abuse")."""

    max_connections: int = 64
    """Open connections at most; one more is reset at accept."""
    request_timeout: float = 10.0
    """Seconds from accept to a complete request head (TLS handshake included), and for writing the answer."""
    idle_timeout: float = 5.0
    """Seconds without a byte moving either way before the connection is closed."""
    max_head_bytes: int = 8192
    """Request line plus headers; a larger head is answered ``431``."""
    backlog: int = 128
    """The listening socket's queue of connections not yet accepted."""


DEFAULT_LIMITS: Final = Limits()


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    headers: Mapping[str, str]
    """Lower-case names; the first of repeated headers."""

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


Handler: TypeAlias = Callable[[Request], Response]
State: TypeAlias = Literal["handshake", "read", "handle", "write", "linger"]


def _ignore(reason: DropReason) -> None:
    del reason


def text(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, f"{message}\n".encode(), headers=headers)


def parse_head(head: bytes) -> Request | Response:
    """The request of one head (request line and headers, without the blank line), or the answer
    to a malformed one."""
    lines = head.decode("latin-1").split("\n")
    parts = lines[0].rstrip("\r").split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1]:
        return text(400, "bad request")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        return text(505 if version.startswith("HTTP/") else 400, "HTTP version not supported")
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        line = raw.rstrip("\r")
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return text(400, "bad request")  # also folded lines, which start with white space
        headers.setdefault(name.lower(), value.strip())
    return Request(method, target, headers)


def _head_end(buffer: bytearray) -> int:
    """Where the request head ends (after its blank line), or -1; bare LF line ends are accepted."""
    ends = [i + n for i, n in ((buffer.find(b"\n\r\n"), 3), (buffer.find(b"\n\n"), 2)) if i >= 0]
    return min(ends) if ends else -1


def encode(response: Response, with_body: bool) -> bytes:
    try:
        phrase = HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""
    lines = [
        f"HTTP/1.1 {response.status} {phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in response.headers),
    ]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + response.body if with_body else head


class _Connection:
    __slots__ = ("sock", "state", "inbuf", "out", "sent", "deadline", "active", "events", "closed")

    def __init__(self, sock: socket.socket, state: State, now: float, deadline: float) -> None:
        self.sock = sock
        self.state: State = state
        self.inbuf = bytearray()
        self.out = memoryview(b"")
        self.sent = 0
        self.deadline = deadline
        self.active = now
        self.events = 0
        self.closed = False


class HttpServer:
    """A running server on its own thread; :meth:`close` stops it and frees the port.

    The thread sleeps in ``select`` until a connection, a byte or :meth:`close` wakes it, or until
    the nearest deadline of an open connection: with none open it wakes for nothing, never on a
    timer (every replica serves these ports all day)."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: Handler,
        *,
        tls: Callable[[], ssl.SSLContext] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        workers: int = 0,
        on_drop: Callable[[DropReason], None] = _ignore,
        name: str = "metrics-http",
    ) -> None:
        """Binds ``address`` (``OSError`` when it cannot) and starts serving.

        ``tls`` gives the context for each new connection (a rotated certificate applies to the
        next one); ``workers`` > 0 runs ``handler`` on that many threads instead of the selector's."""
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.create_server(address, family=family, backlog=limits.backlog)
        self._listener.setblocking(False)
        self._handler = handler
        self._tls = tls
        self._limits = limits
        self._on_drop = on_drop
        self._conns: set[_Connection] = set()
        self._paused_until: float | None = None
        """Accepting stopped until then: the process ran out of file descriptors."""
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._closing = False
        self._done: deque[tuple[_Connection, Request, Response]] = deque()
        self._jobs: SimpleQueue[tuple[_Connection, Request] | None] = SimpleQueue()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._workers = [named_thread(self._work, f"metrics-auth-{i}") for i in range(workers)]
        for worker in self._workers:
            worker.start()
        self._thread = named_thread(self._serve, name)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def secure(self) -> bool:
        return self._tls is not None

    def close(self) -> None:
        """Stop serving, close every connection and free the port."""
        self._closing = True
        self._wake()
        self._thread.join(timeout=10)
        for _ in self._workers:
            self._jobs.put(None)
        for worker in self._workers:
            worker.join(timeout=10)
        for conn in list(self._conns):
            self._close(conn)
        self._selector.close()
        self._listener.close()
        self._wake_read.close()
        self._wake_write.close()

    # --- the selector thread ------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            ready = self._selector.select(self._timeout())
            for key, mask in ready:
                conn = key.data
                if isinstance(conn, _Connection):
                    self._step(conn, mask)
                elif key.fileobj is self._listener:
                    self._accept()
                elif self._woken():
                    return
            self._expire()

    def _timeout(self) -> float | None:
        due = min((self._due(conn) for conn in self._conns), default=float("inf"))
        if self._paused_until is not None:
            due = min(due, self._paused_until)
        if due == float("inf"):
            return None
        return max(0.0, due - time.monotonic())

    def _due(self, conn: _Connection) -> float:
        if conn.state == "handle":
            return float("inf")  # the handler's own calls have their timeouts
        if conn.state == "linger":
            return conn.deadline
        return min(conn.deadline, conn.active + self._limits.idle_timeout)

    def _expire(self) -> None:
        now = time.monotonic()
        if self._paused_until is not None and self._paused_until <= now:
            self._paused_until = None
            self._selector.register(self._listener, selectors.EVENT_READ)
        for conn in [c for c in self._conns if self._due(c) <= now]:
            if conn.state != "linger":
                self._on_drop("timeout")
            self._close(conn)

    def _woken(self) -> bool:
        """Drain the wake-up socket and write the answers handlers left; ``True`` when closing."""
        try:
            while self._wake_read.recv(4096):
                pass
        except BlockingIOError:
            pass
        if self._closing:
            return True
        while self._done:
            conn, request, response = self._done.popleft()
            if not conn.closed:
                self._guarded(conn, lambda: self._respond(conn, request, response))
        return False

    def _wake(self) -> None:
        try:
            self._wake_write.send(b"x")
        except (BlockingIOError, OSError):
            pass  # a byte is already waiting, or the server is closed

    def _accept(self) -> None:
        # At most a backlog's worth per wake-up, so a flood of connections cannot keep the loop
        # from the deadlines and answers of the ones it holds.
        for _ in range(self._limits.backlog):
            try:
                sock, _peer = self._listener.accept()
            except (BlockingIOError, ConnectionAbortedError):
                return
            except OSError as problem:
                # Out of file descriptors: the backlog stays readable, so stop looking at it for a
                # while rather than spin on it.
                log.warning("cannot accept a metrics connection; pausing", extra={"error": str(problem)[:200]})
                self._selector.unregister(self._listener)
                self._paused_until = time.monotonic() + PAUSE
                return
            if len(self._conns) >= self._limits.max_connections:
                self._on_drop("limit")
                _reset(sock)
                continue
            self._open(sock)

    def _open(self, sock: socket.socket) -> None:
        now = time.monotonic()
        sock.setblocking(False)
        state: State = "read"
        if self._tls is not None:
            try:
                sock = self._tls().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except (OSError, ValueError) as problem:
                log.debug("metrics connection failed", extra={"error": str(problem)[:200]})
                sock.close()
                return
            state = "handshake"
        conn = _Connection(sock, state, now, now + self._limits.request_timeout)
        self._conns.add(conn)
        self._watch(conn, selectors.EVENT_READ)
        if state == "handshake":
            self._guarded(conn, lambda: self._handshake(conn))

    def _step(self, conn: _Connection, mask: int) -> None:
        if conn.closed:
            return
        conn.active = time.monotonic()
        if conn.state == "handshake":
            self._guarded(conn, lambda: self._handshake(conn))
        elif conn.state == "read":
            self._guarded(conn, lambda: self._read(conn))
        elif conn.state == "write":
            self._guarded(conn, lambda: self._write(conn))
        elif conn.state == "linger":
            self._guarded(conn, lambda: self._linger(conn))

    def _guarded(self, conn: _Connection, action: Callable[[], None]) -> None:
        try:
            action()
        except OSError as problem:  # ssl.SSLError too: a failed handshake, a client gone away
            log.debug("metrics connection failed", extra={"error": str(problem)[:200]})
            self._close(conn)
        except Exception:  # a bug here must cost one connection, never the port
            log.exception("metrics connection failed")
            self._close(conn)

    def _handshake(self, conn: _Connection) -> None:
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        conn.state = "read"
        self._watch(conn, selectors.EVENT_READ)
        self._read(conn)  # the request may have come with the handshake's last flight

    def _read(self, conn: _Connection) -> None:
        limit = self._limits.max_head_bytes
        while True:
            try:
                chunk = conn.sock.recv(_RECV_BYTES)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            if not chunk:
                self._close(conn)  # gone before asking anything
                return
            conn.inbuf += chunk
            end = _head_end(conn.inbuf)
            if end > limit or (end < 0 and len(conn.inbuf) > limit):
                self._on_drop("too_large")
                self._answer(conn, text(431, "request header fields too large"), with_body=True)
                return
            if end >= 0:
                self._dispatch(conn, bytes(conn.inbuf[:end]))
                return

    def _dispatch(self, conn: _Connection, head: bytes) -> None:
        parsed = parse_head(head)
        conn.inbuf = bytearray()
        if isinstance(parsed, Response):
            self._answer(conn, parsed, with_body=True)
            return
        conn.state = "handle"
        self._unwatch(conn)
        if self._workers:
            self._jobs.put((conn, parsed))
        else:
            self._respond(conn, parsed, self._call(parsed))

    def _respond(self, conn: _Connection, request: Request, response: Response) -> None:
        self._answer(conn, response, with_body=request.method != "HEAD")

    def _answer(self, conn: _Connection, response: Response, *, with_body: bool) -> None:
        now = time.monotonic()
        conn.out = memoryview(encode(response, with_body))
        conn.sent = 0
        conn.state = "write"
        conn.deadline = now + self._limits.request_timeout
        conn.active = now
        self._write(conn)

    def _write(self, conn: _Connection) -> None:
        while conn.sent < len(conn.out):
            try:
                conn.sent += conn.sock.send(conn.out[conn.sent : conn.sent + _SEND_BYTES])
            except (BlockingIOError, ssl.SSLWantWriteError):
                self._watch(conn, selectors.EVENT_WRITE)
                return
            except ssl.SSLWantReadError:
                self._watch(conn, selectors.EVENT_READ)
                return
        conn.out = memoryview(b"")
        conn.sock.shutdown(socket.SHUT_WR)
        conn.state = "linger"
        conn.deadline = time.monotonic() + LINGER
        self._watch(conn, selectors.EVENT_READ)

    def _linger(self, conn: _Connection) -> None:
        while True:
            try:
                if not conn.sock.recv(_RECV_BYTES):
                    self._close(conn)
                    return
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return

    def _watch(self, conn: _Connection, events: int) -> None:
        if conn.events == events:
            return
        if conn.events:
            self._selector.modify(conn.sock, events, conn)
        else:
            self._selector.register(conn.sock, events, conn)
        conn.events = events

    def _unwatch(self, conn: _Connection) -> None:
        if conn.events:
            self._selector.unregister(conn.sock)
            conn.events = 0

    def _close(self, conn: _Connection) -> None:
        if conn.closed:
            return
        conn.closed = True
        try:
            self._unwatch(conn)
        except (KeyError, ValueError, OSError):
            pass
        self._conns.discard(conn)
        conn.sock.close()

    # --- handlers -----------------------------------------------------------------------------

    def _call(self, request: Request) -> Response:
        try:
            return self._handler(request)
        except Exception:  # a handler that raises answers 500, never takes the port down
            log.exception("metrics request failed")
            return text(500, "internal server error")

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            conn, request = job
            response = self._call(request)
            self._done.append((conn, request, response))
            self._wake()


def _reset(sock: socket.socket) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _ABORT)
    except OSError:
        pass
    sock.close()
