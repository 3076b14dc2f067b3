"""A thin raw-JSON Kubernetes client: the effect layer's only adapter to the ``kubernetes`` package.

Configuration comes from the ``kubernetes`` package (kubeconfig files, contexts,
exec plugins, token refresh, in-cluster service accounts), found the way kubectl
users expect: ``--kubeconfig``, then ``$KUBECONFIG``, then ``~/.kube/config``,
then the in-cluster service account. Requests go straight through the package's
``urllib3`` pool manager (TLS and client certificates already set up) and bodies
are read with ``json.loads`` (through ``pure.readers.json.loads``, which keeps an
integer literal longer than Python converts as a value the decoders refuse, rather
than failing the whole body): the typed-model deserialisation of the generated
client costs many times ``json.loads`` (docs/performance.md, "Design
measurements") and we decode into our own records anyway
(``kruntimes.pure.readers.kube``).

Request/response calls return ``Result[..., ApiError]``; ``watch`` is a
streaming iterator and raises ``KubeError`` (carrying an ``ApiError``) when the
stream cannot be opened, reports an ``ERROR`` event, or breaks.

One module at about 800 lines: the verbs, the one error classification they share
(``ApiError``), the watch stream and the connection they all use are one client
(client-go's ``rest`` package is one likewise); no part of it is usable alone.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, Protocol, TypeAlias, cast
from urllib.parse import quote, urlencode, urlsplit

import urllib3
from kubernetes import config as _kube_config_module
from kubernetes.client import ApiClient, Configuration
from returns.result import Failure, Result, Success

from kruntimes.jsontext import dumps, loads
from kruntimes.kubeclient.ratelimit import RequestLimiter
from kruntimes.kubeclient.wire import NoAnswer, Stream, StreamBroken, Wire

log = logging.getLogger(__name__)

JSONObject: TypeAlias = dict[str, object]

ServerReset: TypeAlias = Literal["too_large_resource_version", "resource_version_went_back", "lease_recreated", "lease_replaced"]
"""How the API server showed it lost its state: it has not reached a resourceVersion it gave us
(504); it answered with one older than one seen; our Lease was gone, or has another UID."""

MERGE_PATCH: Final = "application/merge-patch+json"
JSON_CONTENT: Final = "application/json"
USER_AGENT: Final = "kruntimes-scheduler"

# --- errors ---------------------------------------------------------------------------

ErrorKind: TypeAlias = Literal[
    "not_found",  # 404
    "conflict",  # 409: the object changed since the resourceVersion we carried
    "already_exists",  # 409 with reason AlreadyExists (create)
    "gone",  # 410: the resourceVersion is too old (watch/list must start over)
    "invalid",  # 400, 422: the request itself is wrong; repeating it will not help
    "unauthorized",  # 401
    "forbidden",  # 403 (RBAC)
    "throttled",  # 429 (API priority and fairness); honour retry_after
    "timeout",  # 504 or reason Timeout / ServerTimeout
    "server",  # other 5xx
    "unreachable",  # the connection could not be made: the request never left
    "transport",  # no HTTP answer after the request was sent: reset, read timeout, TLS
    "bad_response",  # an answer that is not the JSON we expected
]

_RETRIABLE: Final[frozenset[ErrorKind]] = frozenset(
    {"throttled", "timeout", "server", "unreachable", "transport", "bad_response"}
)


@dataclass(frozen=True, slots=True)
class ApiError:
    """Why a request failed: the HTTP status, the Kubernetes ``Status.reason`` and ``Retry-After``."""

    kind: ErrorKind
    status: int
    """The HTTP status; 0 when no response arrived (``transport``)."""
    reason: str
    """``Status.reason`` from the body (``Conflict``, ``NotFound``, ``Expired``…), or ""."""
    message: str
    retry_after: float | None = None
    """Seconds the server asked us to wait (``Retry-After`` header or ``details.retryAfterSeconds``)."""
    causes: tuple[str, ...] = ()
    """The ``reason`` of each of ``details.causes`` (``ResourceVersionTooLarge``, ``FieldValueInvalid``...)."""

    @property
    def too_large_resource_version(self) -> bool:
        """The server has not reached the resourceVersion we asked for (kube-apiserver's 504
        ``Timeout`` with the cause ``ResourceVersionTooLarge``; servers from before the cause
        existed say so only in the message)."""
        return self.kind == "timeout" and (
            "ResourceVersionTooLarge" in self.causes or "Too large resource version" in self.message
        )

    @property
    def retriable(self) -> bool:
        """Repeating the same request later may succeed (conflicts are not: re-read first)."""
        return self.kind in _RETRIABLE

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status else "no response"
        reason = f" {self.reason}" if self.reason else ""
        return f"{self.kind} ({where}{reason}): {self.message}"


class KubeError(Exception):
    """Raised by ``watch`` only; everything else returns ``Failure(ApiError)``."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(str(error))
        self.error = error


def _kind_for(status: int, reason: str) -> ErrorKind:
    if status == 404:
        return "not_found"
    if status == 409:
        return "already_exists" if reason == "AlreadyExists" else "conflict"
    if status == 410:
        return "gone"
    if status in (400, 422):
        return "invalid"
    if status == 401:
        return "unauthorized"
    if status == 403:
        return "forbidden"
    if status == 429:
        return "throttled"
    if status == 504 or reason in ("Timeout", "ServerTimeout"):
        return "timeout"
    if status >= 500:
        return "server"
    return "bad_response"


MAX_RETRY_AFTER: Final = 60.0
"""Seconds of a server's Retry-After honoured at most. The API server asks for a second or
two (priority and fairness); a larger figure, let alone ``1e300`` or ``inf`` (which no
sleep accepts), would stop a watch or a worker for good on one answer."""


def _parse_seconds(value: object) -> float | None:
    """A Retry-After: seconds ≥ 0, at most :data:`MAX_RETRY_AFTER`; ``None`` when it is not one."""
    if isinstance(value, bool):
        return None
    seconds: float
    if isinstance(value, (int, float)):
        if isinstance(value, int) and value > MAX_RETRY_AFTER:
            return MAX_RETRY_AFTER  # before float(): an integer of 400 digits is no float
        seconds = float(value)
    elif isinstance(value, str):
        try:
            seconds = float(value.strip())
        except ValueError:
            return None  # an HTTP date: rare from the API server; treat as absent
    else:
        return None
    if not seconds >= 0:  # negative or NaN
        return None
    return min(seconds, MAX_RETRY_AFTER)


def error_from_status(status: int, body: object, retry_after_header: str | None = None) -> ApiError:
    """Build an ``ApiError`` from an HTTP status and a (possibly absent) ``metav1.Status`` body."""
    reason = ""
    message = ""
    causes: tuple[str, ...] = ()
    retry_after = _parse_seconds(retry_after_header) if retry_after_header is not None else None
    if isinstance(body, Mapping):
        raw_reason = body.get("reason")
        raw_message = body.get("message")
        reason = raw_reason if isinstance(raw_reason, str) else ""
        message = raw_message if isinstance(raw_message, str) else ""
        code = body.get("code")
        if status == 0 and isinstance(code, int) and not isinstance(code, bool):
            status = code  # a watch ERROR event carries its code in the body
        details = body.get("details")
        if isinstance(details, Mapping):
            if retry_after is None:
                retry_after = _parse_seconds(details.get("retryAfterSeconds"))
            causes = _cause_reasons(details.get("causes"))
    return ApiError(
        kind=_kind_for(status, reason),
        status=status,
        reason=reason,
        message=message or f"HTTP {status}",
        retry_after=retry_after,
        causes=causes,
    )


MAX_CAUSES: Final = 16
"""Causes kept of one Status: enough to recognise one, bounded against a hostile answer."""


def _cause_reasons(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    reasons = (cause.get("reason") for cause in raw[:MAX_CAUSES] if isinstance(cause, Mapping))
    return tuple(reason for reason in reasons if isinstance(reason, str))


def transport_error(problem: BaseException) -> ApiError:
    """No answer. ``unreachable`` when the connection was never made (the server cannot have
    seen the request), else ``transport`` (it may have been received and applied)."""
    never_sent = isinstance(problem, urllib3.exceptions.ConnectTimeoutError)  # NewConnectionError is one too
    kind: ErrorKind = "unreachable" if never_sent else "transport"
    return ApiError(kind, 0, "", f"{type(problem).__name__}: {problem}")


# --- paths ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceType:
    """An API resource: group ("" for core), version and plural name."""

    group: str
    version: str
    plural: str

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """``/api/v1/namespaces/ns/pods/name/status`` or ``/apis/group/version/...``; all namespaces when ``None``."""
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        parts = [base]
        if namespace is not None:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource is not None:
                parts.append(subresource)
        return "/".join(parts)


PODS: Final = ResourceType("", "v1", "pods")
RUNS: Final = ResourceType("kruntimes.io", "v1alpha1", "runs")
WORKSPACES: Final = ResourceType("kruntimes.io", "v1alpha1", "persistentworkspaces")
LEASES: Final = ResourceType("coordination.k8s.io", "v1", "leases")

# --- watch events --------------------------------------------------------------------------

WatchEventType: TypeAlias = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
_EVENT_TYPES: Final[frozenset[str]] = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: WatchEventType
    object: JSONObject

    @property
    def resource_version(self) -> str:
        return resource_version_of(self.object)


def resource_version_of(obj: Mapping[str, object]) -> str:
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        value = metadata.get("resourceVersion")
        if isinstance(value, str):
            return value
    return ""


MAX_VERSION_DIGITS: Final = 20
"""The digits of the largest uint64 (etcd's revisions are int64)."""


def version_number(resource_version: str) -> int | None:
    """A resourceVersion as a number, when it is one; ``None`` otherwise.

    The API treats resourceVersions as opaque strings, but kube-apiserver's are etcd revisions:
    decimal, cluster-wide, and increasing with every write of any object. Only such values are
    compared (a server that uses other strings is never judged to go back); the length is checked
    before converting, so a hostile value costs nothing."""
    if not 0 < len(resource_version) <= MAX_VERSION_DIGITS:
        return None
    if not (resource_version.isascii() and resource_version.isdigit()):
        return None
    return int(resource_version)


def _split_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from lines
    if pending.strip():
        yield pending


def parse_watch_stream(chunks: Iterable[bytes]) -> Iterator[WatchEvent]:
    """Newline-delimited watch events from raw chunks; raises ``KubeError`` on an ERROR event or bad line."""
    for line in _split_lines(chunks):
        if not line.strip():
            continue
        try:
            frame = loads(line)
        except ValueError as problem:
            raise KubeError(ApiError("bad_response", 200, "", f"watch line is not JSON: {problem}")) from None
        if not isinstance(frame, dict):
            raise KubeError(ApiError("bad_response", 200, "", "watch line is not a JSON object"))
        event_type = frame.get("type")
        obj = frame.get("object")
        if event_type == "ERROR":
            raise KubeError(error_from_status(0, obj))
        if event_type not in _EVENT_TYPES or not isinstance(obj, dict):
            raise KubeError(ApiError("bad_response", 200, "", f"unexpected watch event type {event_type!r}"))
        yield WatchEvent(cast(WatchEventType, event_type), cast(JSONObject, obj))


# --- configuration ---------------------------------------------------------------------------


class _ConfigLoaders(Protocol):
    """The two loaders of ``kubernetes.config`` we call; the package leaves them unannotated."""

    def load_kube_config(
        self,
        config_file: str | None = None,
        context: str | None = None,
        client_configuration: Configuration | None = None,
        persist_config: bool = True,
    ) -> None: ...

    def load_incluster_config(
        self, client_configuration: Configuration | None = None, try_refresh_token: bool = True
    ) -> None: ...


_loaders: Final = cast(_ConfigLoaders, _kube_config_module)
_ConfigException: Final[type[Exception]] = _kube_config_module.ConfigException

ConfigSource: TypeAlias = Literal["flag", "env", "home", "in-cluster"]


@dataclass(frozen=True, slots=True)
class ConfigError:
    message: str


@dataclass(frozen=True, slots=True)
class Loaded:
    configuration: Configuration
    source: ConfigSource
    """Where it came from, for the startup log line."""


def kubeconfig_files(
    kubeconfig: str | None, *, environ: Mapping[str, str], home: Path | None = None
) -> tuple[ConfigSource, tuple[str, ...]] | None:
    """Which kubeconfig files a command reads, as kubectl finds them: ``--kubeconfig``; else
    ``$KUBECONFIG``, a ``:``-separated list merged in order; else ``~/.kube/config`` if it exists.
    ``None``: no file, so in a pod the in-cluster service account."""
    if kubeconfig:
        return "flag", (kubeconfig,)
    if environ.get("KUBECONFIG"):
        return "env", tuple(part for part in environ["KUBECONFIG"].split(os.pathsep) if part)
    default = (home if home is not None else Path.home()) / ".kube" / "config"
    return ("home", (str(default),)) if default.exists() else None


def load_configuration(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Result[Loaded, ConfigError]:
    """Find and load the cluster configuration as kubectl would: the files of
    :func:`kubeconfig_files`, else the in-cluster service account."""
    env = os.environ if environ is None else environ
    configuration = Configuration()
    found = kubeconfig_files(kubeconfig, environ=env, home=home)
    candidates: list[tuple[ConfigSource, str]] = [] if found is None else [(found[0], os.pathsep.join(found[1]))]
    try:
        if candidates:
            source, path = candidates[0]
            _loaders.load_kube_config(
                config_file=path, context=context, client_configuration=configuration, persist_config=False
            )
            return Success(Loaded(configuration, source))
        if "KUBERNETES_SERVICE_HOST" not in env:
            return Failure(
                ConfigError(
                    "no cluster configuration: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, "
                    "or run inside a pod with a service account"
                )
            )
        _loaders.load_incluster_config(client_configuration=configuration)
        return Success(Loaded(configuration, "in-cluster"))
    except Exception as problem:  # noqa: BLE001 - see below
        # The kubernetes package reports a bad file its own way (ConfigException), but a file
        # that is not YAML escapes it as yaml.YAMLError, and YAML of the wrong shape as a
        # TypeError or AttributeError from deep inside its merge: whatever a file holds, the
        # answer is one line naming the file, never a traceback.
        detail = " ".join(str(problem).split()) or type(problem).__name__
        if not isinstance(problem, (_ConfigException, OSError, ValueError)):
            detail = f"{type(problem).__name__}: {detail}"
        where = f" from {candidates[0][1]}" if candidates else ""
        return Failure(ConfigError(f"cannot load cluster configuration{where}: {detail}"))


# --- the client ---------------------------------------------------------------------------------


def _answered(status: int, data: bytes, retry_after: str | None, read: bool = True) -> Result[JSONObject, ApiError]:
    """A 2xx JSON object is a ``Success`` (an empty object without ``read``: the answer was not decoded); any other answer an ``ApiError``."""
    if not read and 200 <= status < 300:
        return Success({})
    try:
        parsed: object = loads(data) if data else None
    except ValueError:
        parsed = None
    if not 200 <= status < 300:
        return Failure(error_from_status(status, parsed, retry_after))
    if not isinstance(parsed, dict):
        return Failure(ApiError("bad_response", status, "", "response body is not a JSON object"))
    return Success(cast(JSONObject, parsed))


RequestObserver: TypeAlias = Callable[[str, int, float], None]
"""``(method, HTTP status or 0 when no answer arrived, seconds)`` of one finished request."""


POOL_SIZE: Final = 256
"""Connections kept open to the API server at most (watches, workers, Events, Leases)."""

TOKEN_REUSE: Final = 1.0
"""Seconds a bearer token read from the configuration is sent again before it is read anew.
Reading it runs the kubeconfig loader's refresh hook, which re-applies the whole kubeconfig to the
configuration (its host setter scans the environment for proxies) on every call: a tenth of a
request's client CPU. The hook itself replaces a token only within minutes of its expiry (five
for an exec plugin's or an auth provider's) or a minute after it read the token file (in-cluster),
so a token a second old is never one the hook would have replaced; an answer 401 reads it anew at
the next request."""


class Kube:
    """Raw JSON requests against one API server. Thread-safe (urllib3's pool is)."""

    def __init__(
        self,
        configuration: Configuration,
        *,
        request_timeout: float = 30.0,
        user_agent: str = USER_AGENT,
        limiter: RequestLimiter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._configuration = configuration
        self._limiter = limiter if limiter is not None else RequestLimiter(0, 1)
        """Every request takes a token first (``--kube-api-qps``); by default none waits."""
        self._user_agent = user_agent
        self._clock = clock
        self._auth: tuple[float, str | None, str] = (float("-inf"), None, "")
        """(read again after, on the ``clock``; the ``Authorization`` value; the request's fixed
        header lines): replaced whole, so a thread reads it without a lock."""
        # Every open watch holds a connection for its lifetime (three per namespace watched on
        # its own), besides the workers' and the Event writer's; the client's default, five per
        # CPU, would close and reopen connections under that load. Idle slots cost nothing.
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, POOL_SIZE)
        self._api_client = ApiClient(configuration)
        self._pool = self._api_client.rest_client.pool_manager
        self._host = configuration.host.rstrip("/")
        self._request_timeout = request_timeout
        self._timeout = urllib3.Timeout(connect=10.0, read=request_timeout)
        # Requests with one answer each go through our own framing on connections of the one
        # host's pool (kubeclient.wire): urllib3's request and answer objects cost three quarters of
        # a request's client CPU. Not through a proxy, whose manager rewrites requests for it.
        self._wire: Wire | None = None
        self._prefix = ""
        if type(self._pool) is urllib3.PoolManager:
            self._prefix = urlsplit(self._host).path
            direct = self._pool.connection_from_url(self._host)
            self._wire = Wire(direct, connect_timeout=10.0, read_timeout=request_timeout)
        self._observer: RequestObserver | None = None

    def observe(self, observer: RequestObserver | None) -> None:
        """Report every ``request`` to ``observer`` (the scheduler's metrics); one at a time."""
        self._observer = observer

    @property
    def host(self) -> str:
        return self._host

    @property
    def user_agent(self) -> str:
        """Sent with every request; a scheduler sets ``kruntimes-scheduler/<identity>`` so the API
        server's audit log (and the dev cluster's write history) tells replicas apart."""
        return self._user_agent

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
        self._pool.clear()

    # --- plumbing ---

    def _authorization(self) -> tuple[str | None, str]:
        """The ``Authorization`` value (``None`` without a token) and the header lines every request
        carries (``Accept``, ``User-Agent``, ``Authorization``), read from the configuration at most
        once per :data:`TOKEN_REUSE`; the lines are "" when a value holds a line break."""
        until, value, lines = self._auth
        now = self._clock()
        if now < until:
            return value, lines
        bearer = self._configuration.auth_settings().get("BearerToken")
        value = bearer["value"] if bearer is not None and bearer["value"] else None  # refreshed by the loader's hook
        fixed = {"Accept": JSON_CONTENT, "User-Agent": self._user_agent}
        if value is not None:
            fixed["Authorization"] = value
        safe = not any("\r" in v or "\n" in v for v in fixed.values())
        lines = "".join(f"{name}: {v}\r\n" for name, v in fixed.items()) if safe else ""
        self._auth = (now + TOKEN_REUSE, value, lines)
        return value, lines

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": JSON_CONTENT, "User-Agent": self._user_agent}
        if content_type is not None:
            headers["Content-Type"] = content_type
        value, _ = self._authorization()
        if value is not None:
            headers["Authorization"] = value
        return headers

    def _url(self, path: str, params: Mapping[str, str] | None) -> str:
        query = f"?{urlencode(sorted(params.items()))}" if params else ""
        return f"{self._host}{path}{query}"

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        read: bool = True,
    ) -> Result[JSONObject, ApiError]:
        """One request; a 2xx JSON object is a ``Success``, anything else an ``ApiError``.
        Without ``read`` a 2xx answer is not decoded (a write whose answer nobody reads: decoding
        it was most of an Event write's client CPU); the ``Success`` holds an empty object."""
        observer = self._observer
        if observer is None:
            return self._request(method, path, params, body, content_type, read)
        started = time.perf_counter()
        result = self._request(method, path, params, body, content_type, read)
        failed = result.failure() if isinstance(result, Failure) else None
        observer(method, 200 if failed is None else failed.status, time.perf_counter() - started)
        return result

    def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: bytes | None,
        content_type: str | None,
        read: bool = True,
    ) -> Result[JSONObject, ApiError]:
        self._limiter.take()
        content = content_type if body is not None else None
        wire = self._wire
        if wire is not None:
            query = f"?{urlencode(sorted(params.items()))}" if params else ""
            _, lines = self._authorization()
            if not lines or (content is not None and ("\r" in content or "\n" in content)):
                return Failure(ApiError("invalid", 0, "", "a header value holds a line break (a malformed token?)"))
            if content is not None:
                lines = f"{lines}Content-Type: {content}\r\n"
            answer = wire.request(method, f"{self._prefix}{path}{query}", lines, body)
            if isinstance(answer, NoAnswer):
                kind: ErrorKind = "transport" if answer.sent else "unreachable"
                return Failure(ApiError(kind, 0, "", answer.reason))
            return self._answered(answer.status, answer.body, answer.retry_after, read)
        try:  # through a proxy
            response = self._pool.request(
                method, self._url(path, params), body=body, headers=self._headers(content), timeout=self._timeout,
                retries=False, preload_content=True,
            )
        except urllib3.exceptions.HTTPError as problem:
            return Failure(transport_error(problem))
        return self._answered(response.status, response.data, response.headers.get("Retry-After"), read)

    def _answered(
        self, status: int, data: bytes, retry_after: str | None, read: bool = True
    ) -> Result[JSONObject, ApiError]:
        if status == 401:
            self._auth = (float("-inf"), None, "")  # the token may have been replaced: read it at the next request
        return _answered(status, data, retry_after, read)

    # --- verbs ---

    def get(self, path: str) -> Result[JSONObject, ApiError]:
        return self.request("GET", path)

    def create(self, path: str, body: Mapping[str, object], *, read: bool = True) -> Result[JSONObject, ApiError]:
        """POST ``body`` to the collection ``path`` (``read``: see :meth:`request`)."""
        return self.request("POST", path, body=dumps(body), content_type=JSON_CONTENT, read=read)

    def update(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
        """PUT ``body`` (carrying ``metadata.resourceVersion`` for optimistic concurrency)."""
        return self.request("PUT", path, body=dumps(body), content_type=JSON_CONTENT)

    def delete(self, path: str, *, resource_version: str = "") -> Result[JSONObject, ApiError]:
        """DELETE the object at ``path``; with ``resource_version``, only that version of it
        (``DeleteOptions.preconditions``: a newer version answers 409 Conflict)."""
        if not resource_version:
            return self.request("DELETE", path)
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": resource_version}}
        return self.request("DELETE", path, body=dumps(options), content_type=JSON_CONTENT)

    def patch(
        self, path: str, body: str | bytes, content_type: str = MERGE_PATCH, *, read: bool = True
    ) -> Result[JSONObject, ApiError]:
        raw = body.encode() if isinstance(body, str) else body
        return self.request("PATCH", path, body=raw, content_type=content_type, read=read)

    def patch_status(
        self, path: str, body: str | bytes, content_type: str = MERGE_PATCH
    ) -> Result[JSONObject, ApiError]:
        """PATCH the ``status`` subresource of the object at ``path``."""
        return self.patch(f"{path}/status", body, content_type)

    def list(
        self, path: str, params: Mapping[str, str] | None = None, *, page_size: int = 500
    ) -> Result[tuple[tuple[JSONObject, ...], str], ApiError]:
        """Every item of the collection (following ``continue`` pages) and the list's resourceVersion."""
        items: list[JSONObject] = []
        for page in self.list_pages(path, params, page_size=page_size):
            body = page.value_or(None)
            if body is None:
                return Failure(page.failure())
            items.extend(body[0])
            if body[1] is not None:
                return Success((tuple(items), body[1]))
        return Failure(ApiError("bad_response", 200, "", "list ended without a resourceVersion"))  # pragma: no cover

    def current_version(self, path: str, params: Mapping[str, str] | None = None) -> Result[str, ApiError]:
        """The collection's resourceVersion now: the first page of a one-item list (a consistent
        read, whatever the collection's size)."""
        page = self.request("GET", path, params={**(params or {}), "limit": "1"})
        body = page.value_or(None)
        if body is None:
            return Failure(page.failure())
        metadata = body.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
        if not isinstance(version, str):
            return Failure(ApiError("bad_response", 200, "", "list without a resourceVersion"))
        return Success(version)

    def list_pages(
        self, path: str, params: Mapping[str, str] | None = None, *, page_size: int = 500
    ) -> Iterator[Result[tuple[tuple[JSONObject, ...], str | None], ApiError]]:
        """The collection page by page (``limit``/``continue``); the last page carries the list's
        resourceVersion, the others ``None``; a failure ends the iteration. An informer decodes
        each page before fetching the next, so a 100k-object list never sits in memory as raw
        JSON all at once (its peak would stay in the process as freed-but-held arenas)."""
        query = dict(params or {})
        if page_size > 0:
            query["limit"] = str(page_size)
        while True:
            page = self.request("GET", path, params=query)
            body = page.value_or(None)
            if body is None:
                yield Failure(page.failure())
                return
            raw_items = body.get("items")
            if raw_items is not None and not isinstance(raw_items, list):
                yield Failure(ApiError("bad_response", 200, "", "list items is not an array"))
                return
            items = tuple(item for item in raw_items or () if isinstance(item, dict))
            metadata = body.get("metadata")
            metadata = metadata if isinstance(metadata, dict) else {}
            token = metadata.get("continue")
            if isinstance(token, str) and token:
                query["continue"] = token
                yield Success((items, None))
                continue
            version = metadata.get("resourceVersion")
            yield Success((items, version if isinstance(version, str) else ""))
            return

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
        params: Mapping[str, str] | None = None,
    ) -> WatchStream:
        """Stream watch events after ``resource_version`` until the server ends the watch.

        The server closes the stream after ``timeout_seconds``; the iterator then
        ends normally. Raises ``KubeError`` (kind ``gone`` for an expired
        resourceVersion) when the watch cannot go on. The request is sent on the
        first ``next()``; ``WatchStream.interrupt()`` (from any thread) ends a
        watch blocked on a quiet stream at once.
        """
        query = dict(params or {})
        query.update(
            {
                "watch": "true",
                "resourceVersion": resource_version,
                "timeoutSeconds": str(timeout_seconds),
                "allowWatchBookmarks": "true" if bookmarks else "false",
            }
        )
        read_timeout = timeout_seconds + 30.0  # no event this long past the server's own timeout: the connection is dead
        wire = self._wire
        if wire is not None:
            target = f"{self._prefix}{path}?{urlencode(sorted(query.items()))}"

            def open_wire() -> _Response:
                self._limiter.take()
                _, lines = self._authorization()
                if not lines:
                    raise KubeError(ApiError("invalid", 0, "", "a header value holds a line break (a malformed token?)"))
                opened = wire.stream(target, lines, read_timeout=read_timeout)
                if isinstance(opened, NoAnswer):
                    raise KubeError(ApiError("transport" if opened.sent else "unreachable", 0, "", opened.reason))
                return _WireResponse(opened)

            return WatchStream(open_wire)
        url = self._url(path, query)

        def open_pooled() -> _Response:
            self._limiter.take()
            try:
                return _PooledResponse(
                    self._pool.request(
                        "GET",
                        url,
                        headers=self._headers(),
                        timeout=urllib3.Timeout(connect=10.0, read=read_timeout),
                        retries=False,
                        preload_content=False,
                    )
                )
            except urllib3.exceptions.HTTPError as problem:
                raise KubeError(transport_error(problem)) from None

        return WatchStream(open_pooled)


class _Response(Protocol):
    """A watch's answer, as :class:`WatchStream` reads it."""

    @property
    def status(self) -> int: ...

    @property
    def retry_after(self) -> str | None: ...

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives; raises ``KubeError`` (``transport``) when it breaks."""
        ...

    def read(self) -> bytes: ...

    def shutdown(self) -> None:
        """From any thread: a read blocked on a quiet stream wakes."""
        ...

    def close(self) -> None:
        """The stream is done with, read to its end or not."""
        ...


class _WireResponse:
    """A watch on a connection of its own (``wire.Stream``): the client's direct path."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream

    @property
    def status(self) -> int:
        return self._stream.status

    @property
    def retry_after(self) -> str | None:
        return self._stream.retry_after

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from self._stream.chunks()
        except StreamBroken as problem:
            raise KubeError(ApiError("transport", 0, "", f"the watch stream broke: {problem}")) from None

    def read(self) -> bytes:
        try:
            return self._stream.read()
        except StreamBroken:
            return b""

    def shutdown(self) -> None:
        self._stream.shutdown()

    def close(self) -> None:
        self._stream.close()


class _PooledResponse:
    """A watch through urllib3's pool (the path through a proxy)."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def retry_after(self) -> str | None:
        return self._response.headers.get("Retry-After")

    def chunks(self) -> Iterator[bytes]:
        """Bytes as they arrive (``read1`` returns what one socket read gave, chunked or not)."""
        response = self._response
        while True:
            try:
                data = response.read1(65536)
            except (urllib3.exceptions.HTTPError, OSError) as problem:
                raise KubeError(transport_error(problem)) from None
            if not data:
                return
            yield data

    def read(self) -> bytes:
        return self._response.read()

    def shutdown(self) -> None:
        response = self._response
        try:
            if isinstance(response, urllib3.HTTPResponse):
                response.shutdown()
            else:
                response.close()
        except (RuntimeError, ValueError, OSError):
            pass  # already released or closed: nothing left to wake

    def close(self) -> None:
        self._response.close()
        self._response.release_conn()


class WatchStream(Iterator[WatchEvent]):
    """One watch request's events; ``interrupt()`` may be called from another thread.

    Interrupting shuts the socket down for reading, so a thread blocked waiting
    for the next event wakes at once and the iteration ends (normally, or with a
    ``transport`` ``KubeError``); a stream interrupted before it was opened never
    sends its request. A stream's connection is closed when the stream ends, never
    given back half-read.
    """

    def __init__(self, open_stream: Callable[[], _Response]) -> None:
        self._open = open_stream
        self._lock = threading.Lock()
        self._response: _Response | None = None
        self._interrupted = False
        self._events: Iterator[WatchEvent] | None = None

    def __iter__(self) -> WatchStream:
        return self

    def __next__(self) -> WatchEvent:
        if self._events is None:
            self._events = self._run()
        return next(self._events)

    def is_interrupted(self) -> bool:
        with self._lock:
            return self._interrupted

    def interrupt(self) -> None:
        with self._lock:
            self._interrupted = True
            response = self._response
        if response is not None:
            response.shutdown()

    def _run(self) -> Iterator[WatchEvent]:
        if self.is_interrupted():
            return
        response = self._open()
        with self._lock:
            self._response = response
        try:
            if self.is_interrupted():
                return
            if response.status != 200:
                data = response.read()
                try:
                    parsed: object = loads(data) if data else None
                except ValueError:
                    parsed = None
                raise KubeError(error_from_status(response.status, parsed, response.retry_after))
            for event in parse_watch_stream(response.chunks()):
                if self.is_interrupted():
                    return
                yield event
        finally:
            response.close()


def connect(
    kubeconfig: str | None = None, context: str | None = None, *, user_agent: str = USER_AGENT,
    limiter: RequestLimiter | None = None,
) -> Result[Kube, ConfigError]:
    """Load the configuration as kubectl would and return a client for it."""
    loaded = load_configuration(kubeconfig, context)
    if not isinstance(loaded, Success):
        return Failure(loaded.failure())
    configuration = loaded.unwrap().configuration
    try:
        return Success(Kube(configuration, user_agent=user_agent, limiter=limiter))
    except (ValueError, urllib3.exceptions.HTTPError) as problem:  # a server URL no pool can reach
        detail = " ".join(str(problem).split())
        return Failure(ConfigError(f"cannot use the cluster's server {configuration.host!r}: {detail}"))
