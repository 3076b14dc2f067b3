"""``--metrics-secure``: the metrics port over TLS, each request authenticated and authorised by the API server.

The shape of kube-scheduler's secure serving and controller-runtime's
``filters.WithAuthenticationAndAuthorization``: a bearer token is checked with an
``authentication.k8s.io/v1`` TokenReview, the user it names is authorised for the request's
path and lower-case verb with an ``authorization.k8s.io/v1`` SubjectAccessReview
(``nonResourceAttributes``), both through the scheduler's own API client, so its
ServiceAccount needs ``create`` on both (deploy/components/metrics-secure).

- No or malformed ``Authorization: Bearer`` header, or a token the API server does not know: 401.
- A known user without the permission: 403.
- ``--authorization-always-allow-paths`` (``/healthz,/readyz,/livez``, kube-scheduler's default)
  pass without a token: kubelet probes carry none.
- Answers are cached for a short time (kube-scheduler's 10 s for tokens, allowed and denied
  decisions alike), in bounded maps keyed by a digest of the token, never the token itself.
- A review that fails (no answer, an error status, a body that is not a review) denies: the
  request is answered 500, never served, nothing is cached, a warning is logged at most once a
  minute, and ``kruntimes_scheduler_metrics_auth_review_errors_total{review}`` counts it.

Without ``--tls-cert-file``/``--tls-private-key-file`` a self-signed certificate is made at
start-up (an ECDSA P-256 key that never leaves the process memory but for a moment in a 0700
temporary directory, as ``ssl`` loads only files). Given files are re-read when they change, so a
cert-manager rotation needs no restart.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Generic, Literal, Protocol, TypeAlias, TypeVar, final, get_args

from prometheus_client import CollectorRegistry, Counter
from returns.result import Failure, Result

from kruntimes.kubeclient.kube import ApiError, JSONObject
from kruntimes.kubeclient.throttle import Throttle

log = logging.getLogger(__name__)

DEFAULT_ALWAYS_ALLOW_PATHS: Final = ("/healthz", "/readyz", "/livez")
DEFAULT_CACHE_TTL: Final = 10.0
"""kube-scheduler's ``--authentication-token-webhook-cache-ttl`` and both authorization TTLs."""
CACHE_SIZE: Final = 1024
"""Entries per cache: a handful of scrapers each with one token; bounded so random tokens cannot grow it."""
WARNING_INTERVAL: Final = 60.0
TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

Decision: TypeAlias = Literal["allowed", "always_allowed", "unauthenticated", "forbidden", "review_error"]
ReviewKind: TypeAlias = Literal["token", "access"]


@final
@dataclass(frozen=True, slots=True)
class SecureServingOptions:
    """What ``--metrics-secure`` and its companion flags set."""

    cert_file: Path | None = None
    """PEM certificate (chain) to serve; ``None`` with ``key_file`` ``None``: a self-signed one."""
    key_file: Path | None = None
    always_allow_paths: tuple[str, ...] = DEFAULT_ALWAYS_ALLOW_PATHS
    """Paths served without a token; a trailing ``*`` matches a prefix (kube's rule)."""
    token_cache_ttl: float = DEFAULT_CACHE_TTL
    allowed_cache_ttl: float = DEFAULT_CACHE_TTL
    denied_cache_ttl: float = DEFAULT_CACHE_TTL

    def problems(self) -> tuple[str, ...]:
        found: list[str] = []
        if (self.cert_file is None) != (self.key_file is None):
            found.append("--tls-cert-file and --tls-private-key-file go together")
        for path in self.always_allow_paths:
            if not path.startswith("/"):
                found.append(f"--authorization-always-allow-paths: {path!r} does not start with /")
            elif "*" in path[:-1]:
                found.append(f"--authorization-always-allow-paths: {path!r}: * only as the last character")
        for flag, ttl in (
            ("--authentication-token-webhook-cache-ttl", self.token_cache_ttl),
            ("--authorization-webhook-cache-authorized-ttl", self.allowed_cache_ttl),
            ("--authorization-webhook-cache-unauthorized-ttl", self.denied_cache_ttl),
        ):
            if not ttl >= 0:
                found.append(f"{flag} must not be negative")
        if self.cert_file is not None and self.key_file is not None:
            try:
                context_from_files(self.cert_file, self.key_file)
            except (OSError, ValueError) as problem:
                found.append(f"--tls-cert-file/--tls-private-key-file: {problem}")
        return tuple(found)


class Reviewer(Protocol):
    """What the filter needs of ``kube.Kube``."""

    def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]: ...


@final
@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]
    """Sorted ``(key, values)`` pairs: the user is a cache key, so it must hash."""


@final
@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to one request: ``status`` 0 means serve it."""

    decision: Decision
    status: int
    message: str

    @property
    def allowed(self) -> bool:
        return self.status == 0


_K = TypeVar("_K")
_V = TypeVar("_V")


class TtlCache(Generic[_K, _V]):
    """A bounded map whose entries expire: least recently stored goes first when full."""

    def __init__(self, size: int, clock: Callable[[], float]) -> None:
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[_K, tuple[float, _V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _K) -> tuple[bool, _V | None]:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            if entry[0] <= self._clock():
                del self._entries[key]
                return False, None
            return True, entry[1]

    def put(self, key: _K, value: _V, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._entries[key] = (self._clock() + ttl, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def always_allowed(path: str, patterns: tuple[str, ...]) -> bool:
    return any(path == p or (p.endswith("*") and path.startswith(p[:-1])) for p in patterns)


def bearer_token(header: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>`` (scheme case-insensitive), else ``None``."""
    if not header:
        return None
    parts = header.strip().split(" ")
    if len(parts) != 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


class DelegatedAuth:
    """Authenticates and authorises each request with the API server's review APIs, caching answers briefly."""

    def __init__(
        self,
        reviewer: Reviewer,
        options: SecureServingOptions = SecureServingOptions(),
        *,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self._reviewer = reviewer
        self._options = options
        self._clock = clock
        self._users: TtlCache[bytes, UserInfo | None] = TtlCache(cache_size, clock)
        self._decisions: TtlCache[tuple[UserInfo, str, str], bool] = TtlCache(cache_size, clock)
        self._warnings = Throttle(WARNING_INTERVAL, clock)
        registry = registry if registry is not None else CollectorRegistry()
        decisions = Counter(
            "kruntimes_scheduler_metrics_auth_decisions_total",
            "Requests to the secure metrics port by what authentication and authorization decided.",
            ["decision"],
            registry=registry,
        )
        self._decision_series = {d: decisions.labels(decision=d) for d in get_args(Decision)}
        errors = Counter(
            "kruntimes_scheduler_metrics_auth_review_errors_total",
            "TokenReviews and SubjectAccessReviews that got no usable answer; the request was denied.",
            ["review"],
            registry=registry,
        )
        self._error_series = {k: errors.labels(review=k) for k in get_args(ReviewKind)}

    def check(self, path: str, method: str, authorization: str | None) -> Verdict:
        verdict = self._check(path, method, authorization)
        self._decision_series[verdict.decision].inc()
        return verdict

    def _check(self, path: str, method: str, authorization: str | None) -> Verdict:
        if always_allowed(path, self._options.always_allow_paths):
            return Verdict("always_allowed", 0, "")
        token = bearer_token(authorization)
        if token is None:
            return Verdict("unauthenticated", 401, "Unauthorized")
        user = self._authenticate(token)
        if isinstance(user, ApiError):
            return Verdict("review_error", 500, "Authentication failed")
        if user is None:
            return Verdict("unauthenticated", 401, "Unauthorized")
        allowed = self._authorize(user, path, method.lower())
        if isinstance(allowed, ApiError):
            return Verdict("review_error", 500, "Authorization failed")
        if not allowed:
            return Verdict("forbidden", 403, f"Authorization denied for user {user.name}")
        return Verdict("allowed", 0, "")

    def _authenticate(self, token: str) -> UserInfo | None | ApiError:
        key = hashlib.sha256(token.encode()).digest()
        hit, cached = self._users.get(key)
        if hit:
            return cached
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        answer = self._reviewer.create(TOKEN_REVIEWS, body)
        if isinstance(answer, Failure):
            return self._failed("token", answer.failure())
        user = _user_of(answer.unwrap())
        if isinstance(user, ApiError):
            return self._failed("token", user)
        self._users.put(key, user, self._options.token_cache_ttl)
        return user

    def _authorize(self, user: UserInfo, path: str, verb: str) -> bool | ApiError:
        key = (user, path, verb)
        hit, cached = self._decisions.get(key)
        if hit and cached is not None:
            return cached
        spec: dict[str, object] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        answer = self._reviewer.create(ACCESS_REVIEWS, body)
        if isinstance(answer, Failure):
            return self._failed("access", answer.failure())
        status = answer.unwrap().get("status")
        allowed = status.get("allowed", False) if isinstance(status, dict) else None
        if not isinstance(allowed, bool):
            return self._failed("access", ApiError("bad_response", 201, "", "a SubjectAccessReview without status.allowed"))
        self._decisions.put(key, allowed, self._options.allowed_cache_ttl if allowed else self._options.denied_cache_ttl)
        return allowed

    def _failed(self, review: ReviewKind, error: ApiError) -> ApiError:
        self._error_series[review].inc()
        suppressed = self._warnings.allow()
        if suppressed is None:
            return error
        log.warning(
            "a metrics request was denied: its review got no usable answer",
            extra={"review": review, "error": str(error)[:200], "suppressed": suppressed},
        )
        return error


def _user_of(review: JSONObject) -> UserInfo | None | ApiError:
    status = review.get("status")
    if not isinstance(status, dict):
        return ApiError("bad_response", 201, "", "a TokenReview without status")
    if status.get("authenticated") is not True:
        return None
    user = status.get("user")
    name = user.get("username") if isinstance(user, dict) else None
    if not isinstance(user, dict) or not isinstance(name, str) or not name:
        return ApiError("bad_response", 201, "", "an authenticated TokenReview without a user name")
    uid = user.get("uid", "")
    groups = user.get("groups") or []
    extra = user.get("extra") or {}
    if not isinstance(uid, str) or not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        return ApiError("bad_response", 201, "", "a TokenReview with a malformed user")
    if not isinstance(extra, dict) or not all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in extra.values()):
        return ApiError("bad_response", 201, "", "a TokenReview with malformed extra")
    return UserInfo(name, uid, tuple(groups), tuple((str(k), tuple(v)) for k, v in sorted(extra.items())))


# --- TLS ---------------------------------------------------------------------------------------


def _context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def context_from_files(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context for a PEM certificate chain and its key; ``OSError``/``ValueError`` when unusable."""
    context = _context()
    try:
        context.load_cert_chain(str(cert_file), str(key_file))
    except ssl.SSLError as problem:
        raise ValueError(f"cannot load {cert_file} with {key_file}: {problem.reason or problem}") from None
    return context


def self_signed_pem(hosts: tuple[str, ...], now: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    """A fresh ECDSA P-256 key and a one-year certificate for ``hosts`` (names and IPs), as PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    moment = now or datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{hosts[0]}@{int(moment.timestamp())}")])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(moment - datetime.timedelta(minutes=5))
        .not_valid_after(moment + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def self_signed_context(hosts: tuple[str, ...]) -> ssl.SSLContext:
    cert, key = self_signed_pem(hosts)
    with tempfile.TemporaryDirectory(prefix="kruntimes-tls-") as directory:  # created 0700
        cert_path, key_path = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        cert_path.write_bytes(cert)
        descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(key)
        return context_from_files(cert_path, key_path)


def default_hosts() -> tuple[str, ...]:
    """The names a self-signed certificate is made for: kube-scheduler's choice, the host name and loopback."""
    return tuple(dict.fromkeys((socket.gethostname() or "localhost", "localhost", "127.0.0.1", "::1")))


class TlsContexts:
    """The current server context; given files are re-read (at most once a second) when they change."""

    def __init__(self, options: SecureServingOptions, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._cert = options.cert_file
        self._key = options.key_file
        self._clock = clock
        self._lock = threading.Lock()
        self._checked = clock()
        self._stamp = self._files_stamp()
        self._context = (
            context_from_files(self._cert, self._key)
            if self._cert is not None and self._key is not None
            else self_signed_context(default_hosts())
        )

    def _files_stamp(self) -> tuple[tuple[int, int], ...]:
        if self._cert is None or self._key is None:
            return ()
        out: list[tuple[int, int]] = []
        for path in (self._cert, self._key):
            try:
                info = path.stat()
            except OSError:
                return ()
            out.append((info.st_mtime_ns, info.st_size))
        return tuple(out)

    def current(self) -> ssl.SSLContext:
        if self._cert is None or self._key is None:
            return self._context
        now = self._clock()
        with self._lock:
            if now - self._checked < 1.0:
                return self._context
            self._checked = now
            stamp = self._files_stamp()
            if stamp and stamp != self._stamp:
                try:
                    self._context = context_from_files(self._cert, self._key)
                    self._stamp = stamp
                    log.info("serving certificate reloaded", extra={"cert_file": str(self._cert)})
                except (OSError, ValueError) as problem:  # half-written during a rotation: keep serving the old one
                    log.warning("serving certificate not reloaded", extra={"error": str(problem)[:200]})
            return self._context


@final
@dataclass(frozen=True, slots=True)
class SecureServing:
    """What ``metrics.serve`` needs for the secure mode: the TLS contexts and the request filter."""

    tls: TlsContexts
    auth: DelegatedAuth


def secure_serving(reviewer: Reviewer, options: SecureServingOptions, registry: CollectorRegistry) -> SecureServing:
    return SecureServing(TlsContexts(options), DelegatedAuth(reviewer, options, registry=registry))
