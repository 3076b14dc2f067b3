"""Fault injection for chaos tests: off until a test asks.

A rule matches requests by verb, resource, subresource, namespace and name,
and fires for the next ``count`` matches (or forever) with a seeded
probability, so a chaos run replays exactly from its seed. Faults are checked
before a request touches the store: an injected 409/500/429 changes nothing.
The one exception is ``lose-response``: the write is *applied* (stored, seen by
every watch), then the answer is lost — the connection is closed without a
response, as when it breaks after the server committed, or (with ``code``) a
500/503/504 is sent instead of the object. A client cannot tell either from a
write that never happened; a write the server refuses (409, 422...) is answered
as usual, since nothing was committed.
Rules are set from Python (:class:`Faults`) or, for out-of-process clients,
through the loopback admin endpoint ``POST /_devcluster/faults`` whose JSON
body is :meth:`Faults.apply_json`'s argument.
The engine knows nothing of HTTP or of the store beyond :class:`OpenWatches`:
a fault-injecting proxy in front of another API server gives it its own relayed
watches and applies the same verdicts, so one set of rules means the same on
either server.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal, Protocol, final

from kruntimes.devcluster import errors
from kruntimes.devcluster.errors import REASON_CODES, ApiError
from kruntimes.devcluster.store import Store
from kruntimes.devcluster.types import GroupResource, Obj

FaultAction = Literal["conflict", "error", "latency", "expire-watch", "lose-response"]
WRITE_VERBS: Final = frozenset(("create", "update", "patch", "delete", "deletecollection"))


@final
@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What a fault rule can match on: the request as the API server's authorizer sees it."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    user_agent: str = ""


@final
@dataclass(slots=True)
class FaultRule:
    """Empty match sets mean "any". ``resources`` entries are ``plural`` or ``plural.group``."""

    action: FaultAction
    verbs: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    remaining: int | None = 1
    probability: float = 1.0
    code: int = 500
    retry_after: int | None = None
    latency: float = 0.0
    id: int = 0
    fired: int = field(default=0)
    user_agent: str | None = None
    """Only requests with exactly this User-Agent (one replica of several)."""
    drop_connection: bool = False
    """``lose-response``: close the connection instead of answering ``code``."""

    def matches(self, info: RequestInfo) -> bool:
        qualified = f"{info.resource}.{info.group}" if info.group else info.resource
        return (
            (not self.verbs or info.verb in self.verbs)
            and (not self.resources or info.resource in self.resources or qualified in self.resources)
            and (self.subresource is None or self.subresource == info.subresource)
            and (self.namespace is None or self.namespace == info.namespace)
            and (self.name is None or self.name == info.name)
            and (self.user_agent is None or self.user_agent == info.user_agent)
        )

    def to_json(self) -> Obj:
        out = asdict(self)
        out["verbs"], out["resources"] = sorted(self.verbs), sorted(self.resources)
        return out


@final
@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do to one request: wait, then fail with ``error`` or answer a watch with 410."""

    latency: float = 0.0
    error: ApiError | None = None
    expire_watch: bool = False
    lose_response: bool = False
    """Apply the write, then close the connection without an answer."""
    error_after_commit: ApiError | None = None
    """Apply the write, then answer this error instead of the stored object."""

    @property
    def after_commit(self) -> bool:
        """Whether the answer to an applied write is lost (dropped or replaced by an error)."""
        return self.lose_response or self.error_after_commit is not None


def names_resource(wanted: frozenset[str], group: str, plural: str) -> bool:
    """Whether ``wanted`` (``plural`` or ``plural.group`` entries; empty: every resource) names this one."""
    return not wanted or plural in wanted or str(GroupResource(group, plural)) in wanted


class OpenWatches(Protocol):
    """The watches a :class:`Faults` can end: the dev cluster's store subscriptions, or a proxy's relayed streams."""

    def close_watches(self, wanted: frozenset[str], *, abort: bool) -> int:
        """End every open watch of a resource ``wanted`` names (see :func:`names_resource`); ``abort`` cuts
        the connection instead of ending the stream. Returns how many."""
        ...


@final
class _StoreWatches:
    def __init__(self, store: Store) -> None:
        self._store = store

    def close_watches(self, wanted: frozenset[str], *, abort: bool) -> int:
        return self._store.close_subscriptions(
            lambda s: not wanted or any(names_resource(wanted, r.group, r.plural) for r in s.resources), abort=abort
        )


_REASONS_BY_CODE: Final = {code: reason for reason, code in REASON_CODES.items() if reason not in ("Expired", "AlreadyExists")}


@final
class Faults:
    """The active fault rules of one dev cluster (or proxy). Thread-safe; all randomness from one seeded generator."""

    def __init__(self, watches: Store | OpenWatches, *, seed: int | None = None) -> None:
        self._watches: OpenWatches = _StoreWatches(watches) if isinstance(watches, Store) else watches
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._random = random.Random(seed)
        self._ids = itertools.count(1)

    def seed(self, seed: int) -> None:
        with self._lock:
            self._random.seed(seed)

    def add(self, rule: FaultRule) -> int:
        with self._lock:
            rule.id = next(self._ids)
            self._rules.append(rule)
            return rule.id

    def remove(self, rule_id: int) -> None:
        with self._lock:
            self._rules = [r for r in self._rules if r.id != rule_id]

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)

    # -- conveniences -------------------------------------------------------------------

    def conflict(
        self,
        resource: str | None = None,
        *,
        subresource: str | None = None,
        verbs: Iterable[str] = ("update", "patch"),
        count: int | None = 1,
        probability: float = 1.0,
        namespace: str | None = None,
        name: str | None = None,
    ) -> int:
        """Answer matching writes with 409 Conflict (and change nothing)."""
        return self.add(FaultRule("conflict", frozenset(verbs), _set(resource), subresource, namespace, name, count, probability))

    def error(
        self,
        code: int = 500,
        resource: str | None = None,
        *,
        retry_after: int | None = None,
        subresource: str | None = None,
        verbs: Iterable[str] = (),
        count: int | None = 1,
        probability: float = 1.0,
        namespace: str | None = None,
        name: str | None = None,
        user_agent: str | None = None,
    ) -> int:
        """Answer matching requests with ``code`` (500, 503, 429 with ``Retry-After``...)."""
        if code == 429 and retry_after is None:
            retry_after = 1
        return self.add(
            FaultRule("error", frozenset(verbs), _set(resource), subresource, namespace, name, count, probability, code, retry_after, user_agent=user_agent)
        )

    def latency(self, seconds: float, resource: str | None = None, *, verbs: Iterable[str] = (), count: int | None = None, probability: float = 1.0) -> int:
        """Delay matching requests by ``seconds`` before serving them."""
        return self.add(FaultRule("latency", frozenset(verbs), _set(resource), None, None, None, count, probability, latency=seconds))

    def lose_response(
        self,
        resource: str | None = None,
        *,
        code: int | None = None,
        subresource: str | None = None,
        verbs: Iterable[str] = ("create", "update", "patch"),
        count: int | None = 1,
        probability: float = 1.0,
        namespace: str | None = None,
        name: str | None = None,
        user_agent: str | None = None,
    ) -> int:
        """Apply matching writes, then lose the answer: close the connection unanswered, or with
        ``code`` (500, 503, 504) answer that error although the write was committed."""
        return self.add(
            FaultRule("lose-response", frozenset(verbs), _set(resource), subresource, namespace, name, count, probability,
                      code if code is not None else 0, user_agent=user_agent, drop_connection=code is None)
        )

    def expire_next_watch(self, resource: str | None = None, *, count: int = 1) -> int:
        """The next ``count`` watch requests get an ERROR event with a 410 Expired Status."""
        return self.add(FaultRule("expire-watch", frozenset(("watch",)), _set(resource), None, None, None, count))

    def drop_watches(self, resource: str | None = None, *, abort: bool = False) -> int:
        """End every open watch (of ``resource``) now; ``abort`` cuts the connection instead of ending the stream."""
        return self._watches.close_watches(_set(resource), abort=abort)

    # -- the hook the HTTP layer calls ----------------------------------------------------

    def check(self, info: RequestInfo) -> Verdict:
        latency = 0.0
        with self._lock:
            if not self._rules:
                return Verdict()
            fired: list[FaultRule] = []
            for rule in self._rules:
                if rule.action in ("conflict", "lose-response") and info.verb not in WRITE_VERBS:
                    continue
                if not rule.matches(info):
                    continue
                if rule.probability < 1.0 and self._random.random() >= rule.probability:
                    continue
                fired.append(rule)
                rule.fired += 1
                if rule.remaining is not None:
                    rule.remaining -= 1
            self._rules = [r for r in self._rules if r.remaining is None or r.remaining > 0]
        error: ApiError | None = None
        expire = False
        drop = False
        after_commit: ApiError | None = None
        for rule in fired:
            if rule.action == "latency":
                latency += rule.latency
            elif rule.action == "expire-watch":
                expire = True
            elif rule.action == "lose-response":
                if rule.drop_connection:
                    drop = True
                elif after_commit is None:
                    after_commit = _injected(rule.code, rule.retry_after, "after the write was applied")
            elif error is None and rule.action == "conflict":
                error = errors.conflict(info.group, info.resource, info.name or "", "injected conflict (dev-cluster fault)")
            elif error is None:
                error = _injected(rule.code, rule.retry_after)
        return Verdict(latency, error, expire, drop, None if drop else after_commit)

    # -- the admin endpoint ----------------------------------------------------------------

    def apply_json(self, body: Any) -> Obj:
        """Run one admin command. ``{"action": "conflict"|"error"|"latency"|"expire-watch"|"lose-response"|"drop-watches"|"clear"|"remove"|"seed", ...}``.

        ``lose-response`` applies the matching writes and closes the connection unanswered, or, given
        ``code``, answers that error after applying them.
        Rule fields: ``resource``, ``subresource``, ``verbs``, ``namespace``, ``name``, ``userAgent`` (errors, lose-response),
        ``count`` (null = forever), ``probability``, ``code``, ``retryAfter``, ``seconds``, ``abort``, ``id``, ``seed``.
        """
        if not isinstance(body, dict) or not isinstance(body.get("action"), str):
            raise errors.bad_request('expected a JSON object with an "action"')
        action = body["action"]
        resource = body.get("resource")
        count = body.get("count", 1)
        common: dict[str, Any] = {"namespace": body.get("namespace"), "name": body.get("name"), "count": count, "probability": float(body.get("probability", 1.0))}
        if action == "conflict":
            return {"id": self.conflict(resource, subresource=body.get("subresource"), verbs=body.get("verbs") or ("update", "patch"), **common)}
        if action == "error":
            return {"id": self.error(int(body.get("code", 500)), resource, retry_after=body.get("retryAfter"), subresource=body.get("subresource"), verbs=body.get("verbs") or (), user_agent=body.get("userAgent"), **common)}
        if action == "latency":
            return {"id": self.latency(float(body.get("seconds", 0.1)), resource, verbs=body.get("verbs") or (), count=body.get("count"), probability=common["probability"])}
        if action == "lose-response":
            code = body.get("code")
            return {"id": self.lose_response(resource, code=None if code is None else int(code), subresource=body.get("subresource"), verbs=body.get("verbs") or ("create", "update", "patch"), user_agent=body.get("userAgent"), **common)}
        if action == "expire-watch":
            return {"id": self.expire_next_watch(resource, count=int(count or 1))}
        if action == "drop-watches":
            return {"dropped": self.drop_watches(resource, abort=bool(body.get("abort", False)))}
        if action == "clear":
            self.clear()
            return {"cleared": True}
        if action == "remove":
            self.remove(int(body.get("id", 0)))
            return {"removed": body.get("id")}
        if action == "seed":
            self.seed(int(body.get("seed", 0)))
            return {"seeded": body.get("seed")}
        raise errors.bad_request(f"unknown fault action {action!r}")


def _injected(code: int, retry_after: int | None, when: str = "") -> ApiError:
    reason = _REASONS_BY_CODE.get(code, "InternalError")
    detail = f" {when}" if when else ""
    return ApiError(reason, f"injected {code}{detail} (dev-cluster fault)", code=code, retry_after=retry_after)


def _set(resource: str | None) -> frozenset[str]:
    return frozenset((resource,)) if resource else frozenset()
