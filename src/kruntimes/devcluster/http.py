"""The HTTP face: Kubernetes REST paths, content negotiation, chunked watch streams.

Stdlib ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive: one thread
per connection, which suits the dev cluster's scale (tens of clients and
watches) and needs no dependency. A watch is a chunked response of
newline-delimited JSON events; its thread blocks on its store subscription.
Every connection is tracked so :meth:`DevClusterHTTPServer.stop` can cut idle
keep-alive sockets and end watches, then join every handler thread.

One module at about 700 lines: one request handler serves every REST path (get, list, watch, create,
update, patch, delete and their negotiation), and its routes share the parsing, the error bodies and
the connection tracking.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
import select
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, final
from urllib.parse import parse_qs, unquote, urlsplit

from kruntimes.devcluster import errors, openapi_v2, protobuf, reviews
from kruntimes.devcluster.auth import Authorizer
from kruntimes.devcluster.bodies import MAX_BODY_BYTES, decode_json, decode_yaml, short, too_deep, too_large
from kruntimes.devcluster.discovery import (
    SERVER_VERSION,
    OpenApiCache,
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
)
from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.faults import WRITE_VERBS, Faults, RequestInfo, Verdict
from kruntimes.devcluster.params import check_write_options, delete_options, first, flag, include_object, int64
from kruntimes.devcluster.patches import APPLY, JSON_PATCH, MERGE, STRATEGIC
from kruntimes.devcluster.resources import ResourceDef
from kruntimes.devcluster.selectors import Selection, parse_selection
from kruntimes.devcluster.service import ObjectService, WriteOptions
from kruntimes.devcluster.store import Bookmark, Delivery, WriteContext, WriteRecord
from kruntimes.devcluster.tables import table
from kruntimes.devcluster.types import Obj

_HEALTH: Final = frozenset(("/healthz", "/livez", "/readyz"))
_JSON_TYPES: Final = frozenset(("application/json", ""))
_YAML_TYPES: Final = frozenset(("application/yaml", "application/x-yaml", "text/yaml"))
_PATCH_TYPES: Final = frozenset((MERGE, JSON_PATCH, STRATEGIC))
_OPTIONS_KIND: Final = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions"}
_CHUNK_SIZE: Final = re.compile(rb"[0-9a-fA-F]{1,8}")
_CONTENT_LENGTH: Final = re.compile(r"[0-9]{1,18}")
_MAX_DISCARDED_BYTES: Final = 64 * 1024 * 1024
"""How much of a body over the limit is read and dropped so the client gets its 413 on a connection it
can reuse (Go's server drains an unread body too); a longer body is cut off with the connection."""
_request_ids = itertools.count(1)


@final
@dataclass(frozen=True, slots=True)
class ServerSettings:
    """HTTP-level behaviour of one dev cluster."""

    token: str | None = None
    """Bearer token every request but health checks must carry (None: no authentication, the default for local use)."""
    authorizer: Authorizer = Authorizer()
    """Who a token is and what a user may do (``--token-auth-file``, ``--authorization-policy-file``):
    answers TokenReviews and SubjectAccessReviews; its tokens are accepted like ``token``."""
    bookmark_interval: float = 60.0
    """Seconds between BOOKMARK events on watches that allow them (the API server sends about one a minute)."""
    default_watch_timeout: float = 1800.0
    """Watch length when the client sends no ``timeoutSeconds`` (the API server's minimum request timeout)."""
    log_requests: bool = False
    """One stderr line per request; off so test output stays readable."""


@final
@dataclass(frozen=True, slots=True)
class Route:
    rd: ResourceDef
    namespace: str | None
    name: str
    subresource: str


def _media_types(header: str) -> Iterator[tuple[str, dict[str, str]]]:
    for part in header.split(","):
        fields = [f.strip() for f in part.split(";")]
        params = {}
        for p in fields[1:]:
            key, _, value = p.partition("=")
            params[key.strip().lower()] = value.strip()
        yield fields[0].lower(), params


def table_version(accept: str) -> str | None:
    """``v1``/``v1beta1`` when the client accepts a meta.k8s.io Table before plain JSON."""
    for media, params in _media_types(accept):
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") in ("v1", "v1beta1"):
            return params["v"]
        if media in ("application/json", "*/*") and "as" not in params:
            return None
    return None


def _deleted_status(rd: ResourceDef, obj: Obj) -> Obj:
    """What kube-apiserver answers a delete that removed an object at once (for most kinds)."""
    details: Obj = {"name": obj["metadata"]["name"], "group": rd.group, "kind": rd.plural, "uid": obj["metadata"].get("uid", "")}
    if not rd.group:
        del details["group"]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def record_json(record: WriteRecord) -> Obj:
    return {
        "resourceVersion": record.resource_version,
        "type": record.event_type,
        "verb": record.verb,
        "group": record.resource.group,
        "resource": record.resource.plural,
        "subresource": record.subresource,
        "namespace": record.namespace,
        "name": record.name,
        "userAgent": record.user_agent,
        "requestId": record.request_id,
        "time": record.time,
        "object": record.object,
    }


class DevClusterHTTPServer(ThreadingHTTPServer):
    """Serves one :class:`ObjectService`; remembers its connections so shutdown leaves none behind."""

    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 4096
    """The listen backlog (the kernel caps it at ``net.core.somaxconn``), as Go's listener asks:
    socketserver's default of 5 drops the connections of a burst of clients (a replica taking
    over namespaces opens three watches and three lists for each at once), and a dropped one
    connects only after the client's first SYN retransmission, a second later."""

    def __init__(self, address: tuple[str, int], service: ObjectService, faults: Faults, settings: ServerSettings) -> None:
        self.service = service
        self.faults = faults
        self.settings = settings
        self.openapi = OpenApiCache(service.registry)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self.stopping = threading.Event()
        self._watches = 0
        self._watches_done = threading.Condition()
        super().__init__(address, Handler)

    def watch_started(self) -> None:
        with self._watches_done:
            self._watches += 1

    def watch_ended(self) -> None:
        with self._watches_done:
            self._watches -= 1
            self._watches_done.notify_all()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that vanished mid-request (a killed scheduler) is normal here, not a bug."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def stop(self) -> None:
        """Stop accepting, end every watch, cut every connection, join every handler thread."""
        self.stopping.set()
        self.shutdown()
        self.service.store.close_subscriptions()
        with self._watches_done:  # let open watches end their streams properly before the sockets go
            self._watches_done.wait_for(lambda: self._watches <= 0, timeout=2.0)
        with self._connections_lock:
            live = list(self._connections)
        for conn in live:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    """One connection. Each request is routed, checked against faults, and served or refused with a Status."""

    protocol_version = "HTTP/1.1"
    server_version = "kruntimes-devcluster"
    sys_version = ""
    wbufsize = 64 * 1024
    """Buffered: an answer's headers and body leave in one write, as an API server's buffered writer
    sends a small answer. Written apart, a client could wake once for the headers and again for
    the body, a wake-up a real server would not cost it. An answer flushes when it is complete; a
    watch, after its headers and after each batch of events."""
    _after_commit: Verdict | None = None
    """This request's ``lose-response`` fault, taken by the next ``_send_json`` (the write's answer)."""

    @property
    def srv(self) -> DevClusterHTTPServer:
        server = self.server
        assert isinstance(server, DevClusterHTTPServer)
        return server

    def setup(self) -> None:
        super().setup()
        # A watch's headers and each of its chunks are separate writes; without this, Nagle and
        # delayed ACK would hold a small one back for 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle_expect_100(self) -> bool:
        accepted = super().handle_expect_100()
        self.wfile.flush()  # the client waits for "100 Continue" before it sends the body
        return accepted

    def log_message(self, format: str, *args: Any) -> None:
        if self.srv.settings.log_requests:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- plumbing -------------------------------------------------------------------

    def _read_body(self) -> bytes:
        """The request body, at most :data:`MAX_BODY_BYTES` (kube-apiserver's limit) of it: more is a 413."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        declared = self.headers.get("Content-Length") or "0"
        if not _CONTENT_LENGTH.fullmatch(declared):
            self.close_connection = True  # where this body ends is unknown: the next request cannot be found
            raise errors.bad_request(f"invalid Content-Length: {short(declared, 40)}")
        length = int(declared)
        if length > MAX_BODY_BYTES:
            if length > _MAX_DISCARDED_BYTES:
                self.close_connection = True
            else:
                self._discard(length)
            raise too_large()
        return self.rfile.read(length) if length > 0 else b""

    def _discard(self, length: int) -> None:
        while length > 0:
            got = len(self.rfile.read(min(length, 64 * 1024)))
            if got == 0:
                break
            length -= got

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024).split(b";")[0].strip()
            if not _CHUNK_SIZE.fullmatch(line):
                self.close_connection = True
                raise errors.bad_request("invalid chunked transfer encoding")
            size = int(line, 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                if total > MAX_BODY_BYTES:
                    raise too_large()
                return b"".join(chunks)
            total += size
            if total > _MAX_DISCARDED_BYTES:
                self.close_connection = True
                raise too_large()
            if total > MAX_BODY_BYTES:
                chunks.clear()
                self._discard(size)
            else:
                chunks.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _send_bytes(self, code: int, body: bytes, content_type: str = "application/json", headers: list[tuple[str, str]] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", self._request_id)
        for key, value in headers or []:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()  # here, so a client that hung up is met by the callers' handlers

    def _send_json(self, code: int, obj: Any, *, warnings: list[str] | None = None) -> None:
        lost, self._after_commit = self._after_commit, None
        if lost is not None:
            self._lose_answer(lost)
            return
        # one Warning header per warning, in the form client-go and kubectl print ("Warning: ...")
        headers = [("Warning", '299 - "' + w.replace('"', '\\"') + '"') for w in warnings or []]
        self._send_bytes(code, json.dumps(obj, separators=(",", ":")).encode(), headers=headers)

    def _lose_answer(self, verdict: Verdict) -> None:
        """A ``lose-response`` fault: the write was applied; the client gets no answer, or an error."""
        if verdict.error_after_commit is not None:
            self._send_error(verdict.error_after_commit)
            return
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send_error(self, exc: ApiError) -> None:
        headers = [("Retry-After", str(exc.retry_after))] if exc.retry_after is not None else None
        self._send_bytes(exc.code, json.dumps(exc.status()).encode(), headers=headers)

    def _dispatch(self, method: str) -> None:
        self._request_id = f"devcluster-{next(_request_ids)}"
        self._after_commit = None
        try:
            url = urlsplit(self.path)
            path = unquote(url.path).rstrip("/") or "/"
            query = parse_qs(url.query, keep_blank_values=True)
            body = self._read_body()
            if path in _HEALTH:
                self._send_bytes(200, b"ok", "text/plain; charset=utf-8")
                return
            self._authenticate()
            if path.startswith("/_devcluster/"):
                self._serve_admin(method, path, query, body)
                return
            if method == "GET" and self._serve_discovery(path):
                return
            review = reviews.BY_PATH.get(path)
            if review is not None:
                answer = reviews.serve(self._authorizer(), review, method, self._decode_object(body, None) if method == "POST" else None)
                self._send_json(201, answer)
                return
            route = self._route(path)
            if route is None:
                raise ApiError("NotFound", "the server could not find the requested resource")
            self._serve_resource(method, route, query, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except ApiError as exc:
            self._answer_error(exc)
        except RecursionError:  # defence in depth: a body deeper than any decoder check anticipated
            self._answer_error(too_deep())
        except Exception as exc:  # a bug: answer like the API server would (log the traceback, answer briefly)
            sys.stderr.write(f"kruntimes dev-cluster: request {self._request_id} ({self.command} {short(self.path, 200)}) failed:\n")
            traceback.print_exc(limit=20, file=sys.stderr)
            self._answer_error(errors.internal_error(f"{type(exc).__name__}: {short(str(exc))}"))

    def _answer_error(self, exc: ApiError) -> None:
        """Send the error ``Status``; a client that already hung up gets nothing, quietly."""
        try:
            self._send_error(exc)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _authorizer(self) -> Authorizer:
        settings = self.srv.settings
        if settings.token is not None and settings.authorizer.admin_token is None:  # ServerSettings built with a token alone
            return Authorizer(admin_token=settings.token, tokens=settings.authorizer.tokens, policy=settings.authorizer.policy)
        return settings.authorizer

    def _authenticate(self) -> None:
        authorizer = self._authorizer()
        if not authorizer.enabled:
            return
        scheme, _, given = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or authorizer.authenticate(given.strip()) is None:
            raise errors.unauthorized()

    # -- discovery, openapi, admin --------------------------------------------------------

    def _serve_discovery(self, path: str) -> bool:
        registry = self.srv.service.registry
        doc: Obj | None
        if path == "/version":
            doc = SERVER_VERSION
        elif path == "/api":
            host, port = self.srv.server_address[:2]
            doc = api_versions(f"{host!s}:{port}")
        elif path == "/apis":
            doc = api_group_list(registry)
            doc["groups"] = [*doc["groups"], *reviews.discovery_groups()]
        elif path == "/openapi/v2":
            protobuf = "protobuf" in self.headers.get("Accept", "")
            self._send_bytes(200, self.srv.openapi.v2(protobuf=protobuf), openapi_v2.PROTOBUF if protobuf else "application/json")
            return True
        elif path == "/openapi/v3":
            doc = self.srv.openapi.index()
        elif path.startswith("/openapi/v3/"):
            body = self.srv.openapi.document(path[len("/openapi/v3/") :])
            if body is None:
                raise ApiError("NotFound", "the server could not find the requested resource")
            self._send_bytes(200, body)
            return True
        elif path == "/":
            doc = {"paths": sorted({"/api", "/api/v1", "/apis", "/openapi/v2", "/openapi/v3", "/version", "/healthz"} | {"/" + d.group_version_path for d in registry.all()} | {f"/apis/{r.group}/{reviews.VERSION}" for r in reviews.REVIEWS})}
        else:
            parts = path.strip("/").split("/")
            if parts == ["api", "v1"]:
                doc = api_resource_list(registry, "", "v1")
            elif len(parts) == 2 and parts[0] == "apis":
                doc = api_group(registry, parts[1])
                if doc is None and parts[1] in (reviews.AUTHENTICATION, reviews.AUTHORIZATION):
                    doc = {"kind": "APIGroup", "apiVersion": "v1", **reviews.api_group(parts[1])}
            elif len(parts) == 3 and parts[0] == "apis":
                doc = api_resource_list(registry, parts[1], parts[2])
                if doc is None and parts[2] == reviews.VERSION:
                    doc = reviews.resource_list(parts[1])
            else:
                return False
            if doc is None:
                raise ApiError("NotFound", "the server could not find the requested resource")
        self._send_json(200, doc)
        return True

    def _serve_admin(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> None:
        try:
            loopback = ipaddress.ip_address(self.client_address[0]).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise errors.forbidden("the dev-cluster admin endpoints answer only loopback clients")
        srv = self.srv
        if path == "/_devcluster/faults" and method == "GET":
            self._send_json(200, {"rules": [r.to_json() for r in srv.faults.rules()]})
        elif path == "/_devcluster/faults" and method == "POST":
            self._send_json(200, srv.faults.apply_json(decode_json(body)))
        elif path == "/_devcluster/history" and method == "GET":
            since = int64(query, "since") or 0
            store = srv.service.store
            self._send_json(200, {"resourceVersion": str(store.resource_version), "items": [record_json(r) for r in store.writes(since)]})
        elif path == "/_devcluster/stats" and method == "GET":
            store = srv.service.store
            self._send_json(200, {"resourceVersion": str(store.resource_version), "watches": store.subscription_count, "oldestResumable": store.oldest_resumable})
        else:
            raise ApiError("NotFound", f"no admin endpoint {method} {path}")

    # -- resources ------------------------------------------------------------------------

    def _route(self, path: str) -> Route | None:
        parts = path.strip("/").split("/")
        registry = self.srv.service.registry
        if len(parts) >= 3 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 4 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = registry.lookup(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        rd = registry.lookup(group, version, rest[0])
        if rd is None or len(rest) > 3:
            return None
        name = rest[1] if len(rest) > 1 else ""
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and (subresource != "status" or not rd.status_subresource):
            return None
        if rd.namespaced and namespace is None and name:
            return None
        return Route(rd, namespace, name, subresource)

    def _decode_object(self, body: bytes, rd: ResourceDef | None) -> Any:
        """A create or update body in any format the dev cluster reads (protobuf: only a Namespace, ``devcluster/protobuf.py``)."""
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type in _JSON_TYPES:
            return decode_json(body)
        if content_type in _YAML_TYPES:
            return decode_yaml(body)
        if content_type == protobuf.MEDIA_TYPE and rd is not None:
            return protobuf.decode(body, rd.api_version, rd.kind)
        raise errors.unsupported_media_type(content_type)

    def _verb(self, method: str, route: Route, query: dict[str, list[str]]) -> str:
        collection = not route.name
        verbs = {
            ("GET", True): "watch" if flag(query, "watch") else "list",
            ("GET", False): "get",
            ("POST", True): "create",
            ("PUT", False): "update",
            ("PATCH", False): "patch",
            ("DELETE", False): "delete",
            ("DELETE", True): "deletecollection",
        }
        verb = verbs.get((method, collection))
        if verb is None or (verb == "create" and route.rd.namespaced and route.namespace is None):
            raise errors.method_not_allowed(method)
        return verb

    def _serve_resource(self, method: str, route: Route, query: dict[str, list[str]], body: bytes) -> None:
        srv = self.srv
        service = srv.service
        rd, namespace = route.rd, route.namespace
        verb = self._verb(method, route, query)
        user_agent = self.headers.get("User-Agent", "")
        verdict = srv.faults.check(RequestInfo(verb, rd.group, rd.plural, route.subresource, namespace or "", route.name, user_agent))
        if verdict.latency > 0:
            time.sleep(verdict.latency)
        if verdict.error is not None:
            raise verdict.error
        if verdict.after_commit and verb in WRITE_VERBS:
            self._after_commit = verdict
        context = WriteContext(verb, route.subresource, user_agent, self._request_id)
        if verb in _OPTIONS_KIND:
            check_write_options(_OPTIONS_KIND[verb], query)
        options = WriteOptions(dry_run="All" in query.get("dryRun", []), field_validation=first(query, "fieldValidation"))
        tables = table_version(self.headers.get("Accept", ""))
        include = include_object(query) if tables else ""
        ns = namespace or ""
        if verb in ("list", "watch", "deletecollection"):
            selection = parse_selection(first(query, "labelSelector"), first(query, "fieldSelector"), rd.selectable_fields)
            limit = int64(query, "limit") or 0  # read for every verb: a malformed one is a 400 even where it is ignored
            if verb == "watch":
                self._serve_watch(route, selection, query, tables, include, expire=verdict.expire_watch)
            elif verb == "list":
                listed = service.list(rd, namespace, selection, limit=max(limit, 0), continue_token=first(query, "continue"), resource_version=first(query, "resourceVersion"))
                if tables:
                    meta = listed["metadata"]
                    self._send_json(200, table(rd, listed["items"], now=time.time(), resource_version=meta["resourceVersion"], continue_token=meta.get("continue", ""), include_object=include, api_version=f"meta.k8s.io/{tables}"))
                else:
                    self._send_json(200, listed)
            else:
                removal = delete_options(query, decode_json(body) if body.strip() else None)
                self._send_json(200, service.delete_collection(rd, namespace, selection, context, dry_run=removal.dry_run))
            return
        if verb == "get":
            obj = service.get(rd, ns, route.name)
            if tables:
                self._send_json(200, table(rd, [obj], now=time.time(), resource_version=obj["metadata"].get("resourceVersion", ""), include_object=include, api_version=f"meta.k8s.io/{tables}"))
            else:
                self._send_json(200, obj)
        elif verb == "create":
            self._send_json(201, service.create(rd, ns, self._decode_object(body, rd), context, options), warnings=options.warnings)
        elif verb == "update":
            self._send_json(200, service.update(rd, ns, route.name, self._decode_object(body, rd), context, options), warnings=options.warnings)
        elif verb == "patch":
            content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if content_type == APPLY or content_type not in _PATCH_TYPES:
                raise errors.unsupported_media_type(content_type)
            self._send_json(200, service.patch(rd, ns, route.name, content_type, decode_json(body), context, options), warnings=options.warnings)
        else:  # delete
            removal = delete_options(query, decode_json(body) if body.strip() else None)
            obj, gone = service.delete(rd, ns, route.name, context, preconditions=removal.preconditions, dry_run=removal.dry_run)
            # 200 either way, as kube-apiserver answers (it keeps 202 for a rarely used option)
            self._send_json(200, obj if rd.returns_deleted_object or not gone else _deleted_status(rd, obj))

    # -- watch ------------------------------------------------------------------------------

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", self._request_id)
        self.end_headers()
        self.wfile.flush()  # the client's request returns once it has the headers

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _serve_watch(self, route: Route, selection: Selection, query: dict[str, list[str]], tables: str | None, include: str, *, expire: bool) -> None:
        srv = self.srv
        rd = route.rd
        timeout = self._watch_timeout(query)  # before subscribing: a malformed one is a 400 and leaves nothing behind
        try:
            if expire:
                raise errors.expired(f"too old resource version: {first(query, 'resourceVersion') or 0} (injected by dev-cluster fault)")
            sub = srv.service.watch(rd, route.namespace, selection, first(query, "resourceVersion"), send_initial_events=flag(query, "sendInitialEvents"))
        except ApiError as exc:
            if exc.code not in (410, 504):
                raise
            # The API server reports an expired watch, or one from a version it did not reach in
            # time (sendInitialEvents), inside a 200 stream, as one ERROR event.
            self._start_stream()
            self._write_chunk(json.dumps({"type": "ERROR", "object": exc.status()}).encode() + b"\n")
            self._end_stream()
            return
        bookmarks = flag(query, "allowWatchBookmarks")
        encoder = _WatchEncoder(rd, tables, include)
        srv.watch_started()
        start = time.monotonic()
        deadline = start + timeout
        next_bookmark = _next_bookmark(start, deadline, srv.settings.bookmark_interval)
        try:
            self._start_stream()
            while not srv.stopping.is_set():
                now = time.monotonic()
                if now >= deadline:
                    break
                wait = min(deadline - now, 1.0, max(0.0, next_bookmark - now) if bookmarks else 1.0)
                item = sub.get(wait)
                if item is None:
                    if sub.closed:
                        break
                    if bookmarks and time.monotonic() >= next_bookmark:
                        srv.service.store.bookmark(sub)
                        next_bookmark = _next_bookmark(time.monotonic(), deadline, srv.settings.bookmark_interval)
                    elif self._client_gone():
                        self.close_connection = True
                        return
                    continue
                batch = [item, *sub.drain()]
                self._write_chunk(b"".join(encoder.encode(i) for i in batch))
            if sub.aborted:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self._end_stream()
        except OSError:
            self.close_connection = True
        except Exception:  # a bug, after the 200 went out: no Status can follow, so log it and cut the stream
            sys.stderr.write(f"kruntimes dev-cluster: watch {self._request_id} ({short(self.path, 200)}) failed:\n")
            traceback.print_exc(limit=20, file=sys.stderr)
            self.close_connection = True
        finally:
            srv.service.store.unsubscribe(sub)
            srv.watch_ended()

    def _watch_timeout(self, query: dict[str, list[str]]) -> float:
        """``timeoutSeconds`` as kube-apiserver takes it: an int64; 0 or absent is the server's default; negative ends at once."""
        seconds = int64(query, "timeoutSeconds") or 0
        return float(seconds) if seconds else self.srv.settings.default_watch_timeout


BOOKMARK_BEFORE_DEADLINE: Final = 2.0
"""kube-apiserver sends a watch's last bookmark this long before its deadline, so a client always
learns how far a quiet watch got."""


def _next_bookmark(now: float, deadline: float, interval: float) -> float:
    """Every ``interval``, and once :data:`BOOKMARK_BEFORE_DEADLINE` before the deadline (when that
    is still ahead), as kube-apiserver's watch cache does."""
    last = deadline - BOOKMARK_BEFORE_DEADLINE
    return min(now + interval, last) if last > now else now + interval


@final
class _WatchEncoder:
    """Frames deliveries as a watcher asked: plain JSON (encoded once per event) or Tables (headers once)."""

    def __init__(self, rd: ResourceDef, tables: str | None, include_object: str) -> None:
        self._rd = rd
        self._tables = tables
        self._include = include_object
        self._headers_sent = False

    def encode(self, item: Delivery | Bookmark) -> bytes:
        rd = self._rd
        if isinstance(item, Bookmark):
            meta: Obj = {"resourceVersion": str(item.resource_version)}
            if item.initial_events_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            return json.dumps({"type": "BOOKMARK", "object": {"kind": rd.kind, "apiVersion": rd.api_version, "metadata": meta}}).encode() + b"\n"
        event = item.event
        shown = item.shown()
        if self._tables:
            rendered = table(rd, [shown], now=time.time(), resource_version=str(event.resource_version), include_object=self._include, with_headers=not self._headers_sent, api_version=f"meta.k8s.io/{self._tables}")
            self._headers_sent = True
            return json.dumps({"type": item.type, "object": rendered}).encode() + b"\n"
        if shown.get("apiVersion") != rd.api_version or item.left_selection:
            body = json.dumps({**shown, "apiVersion": rd.api_version}).encode()
        else:
            body = event.object_json()
        return b'{"type":"' + item.type.encode() + b'","object":' + body + b"}\n"
