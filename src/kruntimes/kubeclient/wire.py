"""One keep-alive HTTP/1.1 connection per thread for requests whose answer is one body.

The scheduler's writes (a status PATCH per cycle, an Event per bind, Lease renewals) are small
requests with small answers, and their client-side cost is most of what a bind costs the
scheduler beyond planning. Through urllib3 and ``http.client`` most of that cost is machinery such
a request does not need (header objects, the ``email`` parser for the answer's headers, the
pool's bookkeeping); written and read here it is a fraction of that (docs/performance.md,
"Design measurements").

**What is ours and what is not.** Connections are made by the urllib3 pool the rest of the
client uses (its connection class, with the kubeconfig's TLS settings: CA, client certificate,
hostname check), so nothing about trust is decided here. This module only writes the request
line and headers and reads the answer: a status line, headers, and a body framed by
``Content-Length``, chunked transfer encoding, or the end of the connection.

**When a request is sent again.** Never once the whole request may have reached the server,
since a write cannot be known not to have been applied:

- connecting fails: ``unreachable`` (the server never saw the request);
- a kept connection the server closed while it was idle is found before sending (a zero-timeout
  poll) and replaced;
- sending fails on a kept connection: the server holds no complete request, so it is sent once
  on a new connection;
- a GET whose kept connection ends before the first byte of an answer is sent once more (reads
  change nothing);
- anything else after the request was sent (no answer, a cut answer, a read timeout):
  ``transport`` — the caller treats the write as possibly applied.

``pycurl`` was set aside for that last rule: libcurl sends a request again, POST and PATCH
included, when a reused connection closes before any answer byte, and a caller cannot tell that
it did.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from io import BufferedReader
from typing import Final, final

import urllib3

log = logging.getLogger(__name__)

MAX_LINE: Final = 65536
"""Longest status, header or chunk-size line accepted (bytes)."""
MAX_HEADERS: Final = 128
NO_BODY_STATUSES: Final = frozenset({204, 304})


@final
@dataclass(frozen=True, slots=True)
class Answer:
    """A complete HTTP answer."""

    status: int
    body: bytes
    retry_after: str | None = None
    """The ``Retry-After`` header, as sent."""


@final
@dataclass(frozen=True, slots=True)
class NoAnswer:
    """The request got no complete answer."""

    sent: bool
    """``False``: the server cannot have received the whole request (connecting failed)."""
    reason: str


class _Broken(Exception):
    """The connection ended or broke the protocol while an answer was read."""

    def __init__(self, reason: str, *, nothing: bool = False) -> None:
        super().__init__(reason)
        self.nothing = nothing
        """Not one byte of an answer arrived."""


@dataclass(slots=True, weakref_slot=True, eq=False)
class _Connection:
    conn: urllib3.connection.HTTPConnection
    """Keeps the socket (and, over TLS, its context) alive."""
    sock: socket.socket
    reader: BufferedReader
    poller: select.poll
    """Registered for reading on the socket once: asking it is one system call."""
    used: bool = False
    """At least one answer was read on it: it is a kept connection."""

    def close(self) -> None:
        _close(self.reader, self.conn)


def _close(reader: BufferedReader, conn: urllib3.connection.HTTPConnection) -> None:
    try:
        reader.close()
    except OSError:
        pass
    finally:
        conn.close()


class StreamBroken(Exception):
    """A streamed answer ended before its end, broke the protocol, or a read timed out."""


@final
class Stream:
    """An answer read as it arrives, on a connection of its own: status and headers now, the body
    by :meth:`chunks`. :meth:`shutdown` may be called from any thread: a read blocked on a quiet
    stream wakes and the body ends there. :meth:`close` releases the connection (never reused)."""

    def __init__(
        self, conn: urllib3.connection.HTTPConnection, sock: socket.socket, reader: BufferedReader, head: _Head
    ) -> None:
        self._conn = conn
        self._sock = sock
        self._reader = reader
        self._head = head

    @property
    def status(self) -> int:
        return self._head.status

    @property
    def retry_after(self) -> str | None:
        return self._head.retry_after

    def chunks(self) -> Iterator[bytes]:
        """The body's bytes as they arrive: each chunk of a chunked answer, otherwise what one read
        of the socket gave. Ends at the body's end; raises :class:`StreamBroken` before it."""
        reader, head = self._reader, self._head
        try:
            if head.chunked:
                yield from _chunks(reader)
                return
            left = head.length
            while left is None or left > 0:
                data = reader.read1(65536 if left is None else min(left, 65536))
                if not data:
                    if left is not None:
                        raise _Broken("the answer ended before its Content-Length")
                    return  # framed by the end of the connection
                if left is not None:
                    left -= len(data)
                yield data
        except _Broken as problem:
            raise StreamBroken(str(problem)) from None
        except (OSError, ValueError) as problem:
            raise StreamBroken(f"{type(problem).__name__}: {problem}") from None

    def read(self) -> bytes:
        """The whole body (an error answer's)."""
        return b"".join(self.chunks())

    def shutdown(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RD)
        except (OSError, ValueError):
            pass  # closed already: nothing left to wake

    def close(self) -> None:
        _close(self._reader, self._conn)


def host_header(host: str, port: int | None, scheme: str) -> str:
    """The ``Host`` value for ``host``/``port``: the port only when it is not the scheme's default,
    an IPv6 address in brackets."""
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    default = 443 if scheme == "https" else 80
    return name if port is None or port == default else f"{name}:{port}"


class Wire:
    """Requests with one answer each, on one kept connection per calling thread. Thread-safe."""

    def __init__(
        self, pool: urllib3.HTTPConnectionPool, *, connect_timeout: float, read_timeout: float
    ) -> None:
        self._pool = pool
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._host = host_header(pool.host, pool.port, pool.scheme).encode("ascii", "strict")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: weakref.WeakSet[_Connection] = weakref.WeakSet()
        """Every live thread's connection, so :meth:`close` reaches them all. A thread that ends
        drops its connection with its thread-local slot, and the connection's finalizer closes
        it (workers of a past term, informers of a namespace let go)."""

    def close(self) -> None:
        """Close every thread's connection (each thread opens a new one at its next request)."""
        with self._lock:
            connections = list(self._open)
            self._open.clear()
        for connection in connections:
            connection.close()

    def request(self, method: str, target: str, headers: str, body: bytes | None) -> Answer | NoAnswer:
        """Send ``method target`` with ``headers`` (``Name: value\\r\\n`` lines, without ``Host`` and
        ``Content-Length``) and ``body``; the answer, or why there is none."""
        head = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + b"Host: " + self._host + b"\r\n"
        head += headers.encode("latin-1")
        if body is not None:
            head += b"Content-Length: %d\r\n\r\n" % len(body)
            data = head + body
        else:
            data = head + b"\r\n"
        for attempt in (0, 1):
            connection = self._connection()
            if isinstance(connection, NoAnswer):
                return connection
            kept = connection.used
            try:
                connection.sock.sendall(data)
            except OSError as problem:
                self._discard(connection)
                if kept and attempt == 0:
                    continue  # the server never got the whole request: once more, on a new connection
                return NoAnswer(False, f"sending failed: {type(problem).__name__}: {problem}")
            try:
                answer, close = _read_answer(connection.reader, method)
            except _Broken as problem:
                self._discard(connection)
                if problem.nothing and kept and method == "GET" and attempt == 0:
                    continue  # a read: safe to ask again
                return NoAnswer(True, str(problem))
            except (OSError, ValueError) as problem:
                self._discard(connection)
                return NoAnswer(True, f"{type(problem).__name__}: {problem}")
            if close:
                self._discard(connection)
            else:
                connection.used = True
            return answer
        return NoAnswer(True, "unreachable")  # pragma: no cover (the loop returns)

    def stream(self, target: str, headers: str, *, read_timeout: float) -> Stream | NoAnswer:
        """``GET target`` (``headers`` as for :meth:`request`) on a connection of its own, its answer
        read as it arrives (a watch); ``read_timeout``: the longest quiet spell before a read fails."""
        opened = self._connect(read_timeout)
        if isinstance(opened, NoAnswer):
            return opened
        conn, sock = opened
        reader = sock.makefile("rb")
        try:
            sock.sendall(f"GET {target} HTTP/1.1\r\n".encode("latin-1") + b"Host: " + self._host + b"\r\n" + headers.encode("latin-1") + b"\r\n")
        except OSError as problem:
            _close(reader, conn)
            return NoAnswer(False, f"sending failed: {type(problem).__name__}: {problem}")
        try:
            head = _read_head(reader)
        except _Broken as problem:
            _close(reader, conn)
            return NoAnswer(True, str(problem))
        except (OSError, ValueError) as problem:
            _close(reader, conn)
            return NoAnswer(True, f"{type(problem).__name__}: {problem}")
        return Stream(conn, sock, reader, head)

    # --- connections ---

    def _connection(self) -> _Connection | NoAnswer:
        connection: _Connection | None = getattr(self._local, "connection", None)
        if connection is not None:
            try:
                # readable, hung up or invalid; a socket closed here has no descriptor any more
                idle_closed = connection.sock.fileno() < 0 or bool(connection.poller.poll(0))
            except (OSError, ValueError):  # closed under us (``close`` from another thread)
                idle_closed = True
            if not idle_closed:
                return connection
            self._discard(connection)  # the server closed it while idle (or sent what we never asked for)
        opened = self._connect(self._read_timeout)
        if isinstance(opened, NoAnswer):
            return opened
        conn, sock = opened
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        connection = _Connection(conn, sock, sock.makefile("rb"), poller)
        weakref.finalize(connection, _close, connection.reader, conn)
        self._local.connection = connection
        with self._lock:
            self._open.add(connection)
        return connection

    def _connect(self, read_timeout: float) -> tuple[urllib3.connection.HTTPConnection, socket.socket] | NoAnswer:
        try:
            conn = self._pool._new_conn()  # the pool's connection class and TLS settings
            if not isinstance(conn, urllib3.connection.HTTPConnection):  # pragma: no cover (urllib3's own classes are)
                return NoAnswer(False, f"connecting failed: unexpected connection class {type(conn).__name__}")
            conn.timeout = self._connect_timeout
            conn.connect()
            sock = conn.sock
            if sock is None:  # pragma: no cover (connect() sets it or raises)
                conn.close()
                return NoAnswer(False, "connecting failed: no socket")
            sock.settimeout(read_timeout)
        except Exception as problem:  # noqa: BLE001 (any failure to connect is "never sent")
            return NoAnswer(False, f"connecting failed: {type(problem).__name__}: {problem}")
        return conn, sock

    def _discard(self, connection: _Connection) -> None:
        if getattr(self._local, "connection", None) is connection:
            self._local.connection = None
        with self._lock:
            self._open.discard(connection)
        try:
            connection.close()
        except OSError:
            pass


def _line(reader: BufferedReader) -> bytes:
    line = reader.readline(MAX_LINE)
    if not line.endswith(b"\n"):
        raise _Broken("the answer ended inside a line" if len(line) < MAX_LINE else "a line of the answer is too long")
    return line


@dataclass(frozen=True, slots=True)
class _Head:
    status: int
    close: bool
    """The connection ends after this answer (HTTP/1.0, ``Connection: close``)."""
    length: int | None
    chunked: bool
    retry_after: str | None


def _read_head(reader: BufferedReader) -> _Head:
    """An answer's status line and headers (interim 1xx answers skipped)."""
    first = reader.readline(MAX_LINE)
    if not first:
        raise _Broken("the connection closed before an answer", nothing=True)
    while True:
        if not first.endswith(b"\n"):
            raise _Broken("the answer ended inside its status line")
        parts = first.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise _Broken(f"not an HTTP/1.x status line: {first[:40]!r}")
        status = int(parts[1])
        close = parts[0] == b"HTTP/1.0"
        length: int | None = None
        chunked = False
        retry_after: str | None = None
        for _ in range(MAX_HEADERS):
            line = _line(reader)
            if line in (b"\r\n", b"\n"):
                break
            name, colon, value = line.partition(b":")
            if not colon:
                raise _Broken("a header line without a colon")
            key = name.strip().lower()
            if key == b"content-length":
                length = int(value.strip())
                if length < 0:
                    raise _Broken("a negative Content-Length")
            elif key == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif key == b"connection":
                tokens = value.lower()
                close = b"close" in tokens or (close and b"keep-alive" not in tokens)
            elif key == b"retry-after":
                retry_after = value.strip().decode("latin-1")
        else:
            raise _Broken("too many header lines")
        if 100 <= status < 200:
            first = _line(reader)  # an interim answer: the real one follows
            continue
        return _Head(status, close, length, chunked, retry_after)


def _read_answer(reader: BufferedReader, method: str) -> tuple[Answer, bool]:
    """One answer and whether the connection must close after it."""
    head = _read_head(reader)
    close = head.close
    if method == "HEAD" or head.status in NO_BODY_STATUSES:
        body = b""
    elif head.chunked:
        body = b"".join(_chunks(reader))
    elif head.length is not None:
        body = reader.read(head.length)
        if len(body) < head.length:
            raise _Broken("the answer ended before its Content-Length")
    else:
        body = reader.read()  # framed by the end of the connection
        close = True
    return Answer(head.status, body, head.retry_after), close


def _chunks(reader: BufferedReader) -> Iterator[bytes]:
    """The chunks of a chunked body, each as it arrives; its trailers read and dropped."""
    while True:
        size = int(_line(reader).split(b";", 1)[0].strip(), 16)
        if size == 0:
            while _line(reader) not in (b"\r\n", b"\n"):
                pass  # trailers
            return
        chunk = reader.read(size)
        if len(chunk) < size or _line(reader) not in (b"\r\n", b"\n"):
            raise _Broken("the answer ended inside a chunk")
        yield chunk
