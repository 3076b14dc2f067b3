"""A scripted HTTP server on loopback for client tests that need no real API server.

Each route answers ``(status, body)`` or streams ``chunks`` with chunked transfer
encoding, like the API server's watch. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: object = None
    headers: tuple[tuple[str, str], ...] = ()
    chunks: Sequence[bytes] | None = None
    """When set, the body is streamed as these chunks (chunked encoding)."""


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


Route = Callable[[Seen], Reply]


@dataclass
class StubServer:
    routes: dict[tuple[str, str], Route] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)

    def route(self, method: str, path: str, reply: Reply | Route) -> None:
        self.routes[(method, path)] = reply if callable(reply) else (lambda _seen: reply)

    def answer(self, seen: Seen) -> Reply:
        self.seen.append(seen)
        route = self.routes.get((seen.method, seen.path))
        if route is None:
            return Reply(404, {"kind": "Status", "reason": "NotFound", "message": "no route", "code": 404})
        return route(seen)


def _handler_for(stub: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = stub.answer(Seen(self.command, url.path, query, headers, body))
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            for name, value in reply.headers:
                self.send_header(name, value)
            if reply.chunks is not None:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in reply.chunks:
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                return
            data = b"" if reply.body is None else json.dumps(reply.body).encode()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler


class Running:
    def __init__(self, stub: StubServer) -> None:
        self.stub = stub
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(stub))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def running(stub: StubServer) -> Iterator[Running]:
    server = Running(stub)
    try:
        yield server
    finally:
        server.close()


def lines(*frames: object) -> bytes:
    return b"".join(json.dumps(frame).encode() + b"\n" for frame in frames)
