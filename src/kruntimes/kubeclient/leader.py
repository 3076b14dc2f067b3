"""Leader election on a ``coordination.k8s.io/v1`` Lease (SPEC §10), typed and stoppable.

Only the leader runs workers; standbys keep their informers warm and write
nothing. A leader that stops gracefully *releases* the lease (clears
``holderIdentity``) so a standby takes over at its next retry instead of after
a whole lease duration.

Why not ``kubernetes.leaderelection``: its ``Config`` calls ``sys.exit`` on bad
settings, it never releases the lease on shutdown, its loops read
``time.time()`` directly and cannot be stopped, it has no types, and its lock
goes through the typed models we avoid elsewhere. The algorithm below is
client-go's ``tryAcquireOrRenew`` over the raw Lease API: get; create when
absent; otherwise take over only when the holder is empty or the record has
not changed for ``leaseDurationSeconds`` as measured on *our* monotonic clock
(never comparing clocks across machines); write with the observed
``resourceVersion`` so two candidates cannot both win (the loser gets 409).

Writing is fenced by :meth:`LeaderElector.may_write`, not by :meth:`is_leader`:
a standby's takeover clock starts when it *reads* our renewal, which is after
we *started* it, so while ``now < start of the last successful renewal +
renew_deadline`` (``renew_deadline < lease_duration``) nobody can have taken
the Lease yet, whatever our own threads believe. A process paused past that
point (SIGSTOP, a long GC, a stalled renewal) finds the gate closed the moment
it runs again, before its elector thread even notices it lost.

The Lease is also how a candidate notices that the API server lost its state (an
etcd restored from a snapshot, a dev cluster restarted on the same address), every
retry period, leader or standby: ``on_server_reset`` is told when the Lease it last
saw is gone (404) and this candidate creates it anew, when it comes back with
another UID (deleted and recreated), or at a resourceVersion older than one seen
before (kube-apiserver's resourceVersions are etcd revisions, increasing with every
write of any object: ``kube.version_number``). After etcd is restored the Lease is
the snapshot's, at the revision it was written before the snapshot: older than the
versions this candidate saw since, whatever the revision of the cluster is now.
Deleting the Lease by hand reads as a loss too; what follows (a relist) is harmless.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final, Literal, Protocol, TypeAlias

from returns.result import Result

from kruntimes.kubeclient.clock import utcnow
from kruntimes.kubeclient.kube import LEASES, ApiError, JSONObject, ServerReset, resource_version_of, version_number
from kruntimes.kubeclient.throttle import Throttle
from kruntimes.kubeclient.workqueue import Clock

log = logging.getLogger(__name__)

Sleeper: TypeAlias = Callable[[float], bool]
"""Sleep ``seconds``; ``True`` when asked to stop (``threading.Event.wait``)."""
WallClock: TypeAlias = Callable[[], datetime]
Attempt: TypeAlias = Literal["leading", "held_by_other", "error"]
Ending: TypeAlias = Literal["stopped", "lost"]

DEFAULT_LEASE_NAME: Final = "kruntimes-scheduler"
WARN_INTERVAL: Final = 60.0
"""Seconds between two warnings about one kind of failed Lease request."""
LeaseOperation: TypeAlias = Literal["get", "create", "update"]


def default_identity() -> str:
    """``<hostname>_<random>``: the pod name in a cluster, unique across restarts."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:10]}"



def micro_time(value: datetime) -> str:
    """``metav1.MicroTime``: RFC 3339 in UTC with exactly six fractional digits."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def timing_problems(lease_duration: float, renew_deadline: float, retry_period: float) -> tuple[str, ...]:
    """Why these Lease timings cannot fence a writer (renew_deadline < lease_duration is the margin
    that keeps a writer's gate closed before anybody may take over); empty when they can."""
    found: list[str] = []
    if retry_period <= 0:
        found.append("retry period must be positive")
    if renew_deadline <= retry_period:
        found.append("renew deadline must be longer than the retry period")
    if lease_duration <= renew_deadline:
        found.append("lease duration must be longer than the renew deadline")
    if lease_duration < 1:
        found.append("lease duration must be at least one second")
    return tuple(found)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseTimings:
    """How long leadership of a Lease lasts (client-go's defaults): the one home of these three
    numbers, which the elector, the shard member and the scheduler's options all extend
    (keyword-only, so a subclass's own fields stay positional)."""

    lease_duration: float = 15.0
    """A standby takes over this long after the last change it saw to the lease (15 s)."""
    renew_deadline: float = 10.0
    """The leader steps down when it could not renew for this long (10 s, < lease_duration so it
    stops working before anyone may take over)."""
    retry_period: float = 2.0
    """Between attempts to acquire or renew (2 s)."""


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig(LeaseTimings):
    """Where the lease lives, who this candidate is, and the lease's timings."""

    namespace: str
    identity: str
    """This candidate's ``holderIdentity``; unique per process (``default_identity()``)."""
    name: str = DEFAULT_LEASE_NAME

    def problems(self) -> tuple[str, ...]:
        """Every reason this configuration cannot work; empty when it is valid."""
        found: list[str] = []
        if not self.namespace:
            found.append("lease namespace must not be empty")
        if not self.name:
            found.append("lease name must not be empty")
        if not self.identity:
            found.append("identity must not be empty")
        found.extend(timing_problems(self.lease_duration, self.renew_deadline, self.retry_period))
        return tuple(found)


class LeaseApi(Protocol):
    """What the elector needs from ``kube.Kube``."""

    def get(self, path: str) -> Result[JSONObject, ApiError]: ...

    def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]: ...

    def update(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]: ...


INT32_MAX: Final = 2**31 - 1


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The election fields of a Lease's spec."""

    holder: str
    lease_duration_seconds: int
    acquire_time: str
    renew_time: str
    transitions: int

    @staticmethod
    def of(lease: Mapping[str, object]) -> LeaseRecord:
        spec = lease.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}

        def text(key: str) -> str:
            value = spec.get(key)
            return value if isinstance(value, str) else ""

        def number(key: str) -> int:
            # Both fields are int32 in the Lease API; a server that stores a larger figure must
            # not turn ``observed_at + duration`` into an OverflowError (or a lease held for ages).
            value = spec.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= INT32_MAX else 0

        return LeaseRecord(
            holder=text("holderIdentity"),
            lease_duration_seconds=number("leaseDurationSeconds"),
            acquire_time=text("acquireTime"),
            renew_time=text("renewTime"),
            transitions=number("leaseTransitions"),
        )

    def spec(self) -> dict[str, object]:
        return {
            "holderIdentity": self.holder or None,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time or None,
            "renewTime": self.renew_time or None,
            "leaseTransitions": self.transitions,
        }


class LeaderElector:
    """Acquire, renew and release one Lease; call back when leadership starts and stops."""

    def __init__(
        self,
        kube: LeaseApi,
        config: LeaderElectionConfig,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        *,
        clock: Clock = time.monotonic,
        now: WallClock = utcnow,
        sleep: Sleeper | None = None,
        on_server_reset: Callable[[ServerReset], None] | None = None,
    ) -> None:
        problems = config.problems()
        if problems:
            raise ValueError("invalid leader election settings: " + "; ".join(problems))
        self._kube = kube
        self._config = config
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._now = now
        self._stop = threading.Event()
        self._sleep: Sleeper = sleep if sleep is not None else self._stop.wait
        self._path = LEASES.path(config.namespace, config.name)
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._lease: JSONObject | None = None  # the last lease object we read or wrote
        self._leading = False
        self._renew_started: float | None = None
        """Monotonic instant at which the last successful acquire or renew *began* (``None``: not held)."""
        self._on_server_reset = on_server_reset
        """Told on this elector's thread that the Lease shows a server that lost its state (must be quick)."""
        self._lease_uid = ""
        """The UID of the Lease last read or written ("" before any)."""
        self._lease_version: int | None = None
        """The newest numeric resourceVersion of the Lease seen."""
        self._warnings = Throttle(WARN_INTERVAL, clock)

    # --- public ---

    def is_leader(self) -> bool:
        """Whether this candidate believes it leads (a term is open); see :meth:`may_write` for writes."""
        return self._leading

    def may_write(self) -> bool:
        """``True`` only while no standby can have taken the Lease: leading, and less than
        ``renew_deadline`` since the last successful renewal started (on the monotonic clock)."""
        started = self._renew_started
        return self._leading and started is not None and self._clock() < started + self._config.renew_deadline

    @property
    def observed_holder(self) -> str:
        """The holder of the lease as last seen ("" when none or unknown)."""
        return self._observed.holder if self._observed is not None else ""

    def stop(self) -> None:
        """Ask ``run`` to return; a leader releases the lease first."""
        self._stop.set()

    def run(self) -> Ending:
        """Campaign, lead, renew; return ``"stopped"`` after ``stop()`` or ``"lost"`` when leadership ends.

        ``on_started_leading`` runs on this thread and must return promptly (start
        the workers and return). ``on_stopped_leading`` runs exactly once for each
        ``on_started_leading``, after the lease was released or lost.
        """
        # Stepping down ends the term (the next one starts with a relist), so it waits for
        # ``renew_deadline`` after the last renewal *ended*; writes need no such wait: the gate
        # (``may_write``) closes on its own, counted from the renewal's start.
        last_renewal = 0.0
        while not self._stop.is_set():
            if not self._leading:
                if self.try_acquire_or_renew() == "leading":
                    last_renewal = self._clock()
                    self._leading = True
                    log.info("became the leader", extra={"identity": self._config.identity, "lease": self._path})
                    try:
                        self._on_started()
                    except Exception:
                        log.exception("on_started_leading failed; stepping down")
                        self._step_down(release=True)
                        return "lost"
                    continue
                if self._sleep(self._config.retry_period):
                    break
                continue
            if self._sleep(self._config.retry_period):
                break
            attempt = self.try_acquire_or_renew()
            if attempt == "leading":
                last_renewal = self._clock()
            elif attempt == "held_by_other" or self._clock() - last_renewal >= self._config.renew_deadline:
                log.warning("lost the lease", extra={"identity": self._config.identity, "lease": self._path, "attempt": attempt})
                self._step_down(release=False)
                return "lost"
        if self._leading:
            self._step_down(release=True)
        return "stopped"

    def try_acquire_or_renew(self) -> Attempt:
        """One attempt (client-go ``tryAcquireOrRenew``)."""
        now = micro_time(self._now())
        tick = self._clock()
        mine = self._config.identity
        duration = max(1, round(self._config.lease_duration))
        got = self._kube.get(self._path)
        lease = got.value_or(None)
        if lease is None:
            error = got.failure()
            if error.kind != "not_found":
                self._failed("get", error)
                return "error"
            record = LeaseRecord(mine, duration, now, now, 0)
            created = self._kube.create(LEASES.path(self._config.namespace), self._lease_body(None, record))
            stored = created.value_or(None)
            if stored is None:
                self._failed("create", created.failure())
                return "error"
            if self._lease_uid:
                self._server_reset("lease_recreated", "the lease was gone; created it anew")
            self._remember(stored, record, tick)
            self._renew_started = tick
            return "leading"

        self._check_identity(lease)
        old = LeaseRecord.of(lease)
        if old != self._observed:
            self._observed, self._observed_at = old, tick
        self._lease = lease
        held_for = old.lease_duration_seconds if old.lease_duration_seconds > 0 else duration
        if old.holder and old.holder != mine and self._observed_at + held_for > tick:
            self._renew_started = None
            return "held_by_other"
        if old.holder == mine:
            record = LeaseRecord(mine, duration, old.acquire_time or now, now, old.transitions)
        else:
            record = LeaseRecord(mine, duration, now, now, old.transitions + 1)
        updated = self._kube.update(self._path, self._lease_body(lease, record))
        stored = updated.value_or(None)
        if stored is None:
            error = updated.failure()
            if error.kind == "conflict" and old.holder != mine:
                # another candidate took the expired Lease first: the election working, not a failure
                log.info("another candidate took the lease first", extra={"lease": self._path, "identity": mine})
                return "held_by_other"
            self._failed("update", error)
            return "error"
        self._remember(stored, record, tick)
        self._renew_started = tick
        return "leading"

    def release(self) -> bool:
        """Clear the holder if we hold the lease, so a standby can take over at once."""
        for _ in range(2):  # a conflict means our copy is stale: read once more
            lease = self._lease
            if lease is None or LeaseRecord.of(lease).holder != self._config.identity:
                return False
            old = LeaseRecord.of(lease)
            now = micro_time(self._now())
            record = LeaseRecord("", 1, now, now, old.transitions)
            updated = self._kube.update(self._path, self._lease_body(lease, record))
            stored = updated.value_or(None)
            if stored is not None:
                self._renew_started = None
                self._remember(stored, record, self._clock())
                log.info("released the lease", extra={"identity": self._config.identity, "lease": self._path})
                return True
            if updated.failure().kind != "conflict":
                error = updated.failure()
                log.warning(
                    "cannot release the lease; a standby takes over when it expires",
                    extra={"lease": self._path, "error": str(error), "kind": error.kind},
                )
                return False
            self._lease = self._kube.get(self._path).value_or(None)
        return False

    # --- internals ---

    def _failed(self, operation: LeaseOperation, error: ApiError) -> None:
        """A Lease request failed: a warning with the cause, at most once a minute per operation
        and kind of error (the elector retries every ``retry_period``, for as long as it fails:
        a 403 from missing RBAC would otherwise be a line every 2 s forever); the rest at debug."""
        fields = {"lease": self._path, "operation": operation, "error": str(error), "kind": error.kind}
        held = self._warnings.allow(f"{operation}:{error.kind}")
        if held is None:
            log.debug("lease request failed", extra=fields)
            return
        log.warning(
            "lease request failed; retrying (said at most once a minute)",
            extra={**fields, "unlogged_since_last": held},
        )


    def _step_down(self, *, release: bool) -> None:
        if release:
            self.release()
        self._leading = False
        self._renew_started = None
        try:
            self._on_stopped()
        except Exception:
            log.exception("on_stopped_leading failed")

    def _check_identity(self, lease: Mapping[str, object]) -> None:
        """Tell ``on_server_reset`` when ``lease`` is not the one last seen, or older than it."""
        uid = _uid(lease)
        number = version_number(resource_version_of(lease))
        if self._lease_uid and uid and uid != self._lease_uid:
            self._server_reset("lease_replaced", "the lease has another UID")
        elif number is not None and self._lease_version is not None and number < self._lease_version:
            self._server_reset("resource_version_went_back", f"the lease is at resourceVersion {number}")
        self._note(lease)

    def _server_reset(self, reason: ServerReset, what: str) -> None:
        log.warning("the API server lost its state", extra={"what": what, "lease": self._path, "reason": reason})
        self._lease_version = None  # the new server's versions start over
        if self._on_server_reset is not None:
            try:
                self._on_server_reset(reason)
            except Exception:  # the callback's bug must not stop the elector
                log.exception("on_server_reset failed")

    def _note(self, lease: Mapping[str, object]) -> None:
        """The Lease's UID and the newest of its versions, for :meth:`_check_identity`."""
        uid = _uid(lease)
        if uid:
            self._lease_uid = uid
        number = version_number(resource_version_of(lease))
        if number is not None:
            self._lease_version = number if self._lease_version is None else max(self._lease_version, number)

    def _remember(self, stored: JSONObject, record: LeaseRecord, tick: float) -> None:
        self._note(stored)
        self._lease = stored
        self._observed = LeaseRecord.of(stored) if stored.get("spec") is not None else record
        self._observed_at = tick

    def _lease_body(self, current: Mapping[str, object] | None, record: LeaseRecord) -> dict[str, object]:
        if current is None:
            return {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._config.name, "namespace": self._config.namespace},
                "spec": {k: v for k, v in record.spec().items() if v is not None},
            }
        body = dict(current)
        spec = current.get("spec")
        merged: dict[str, object] = dict(spec) if isinstance(spec, Mapping) else {}
        merged.update(record.spec())
        body["spec"] = {k: v for k, v in merged.items() if v is not None}
        metadata = current.get("metadata")
        body["metadata"] = dict(metadata) if isinstance(metadata, Mapping) else {}
        if not resource_version_of(body):
            log.debug("the lease has no resourceVersion; the update is unguarded", extra={"lease": self._path})
        return body


def _uid(obj: Mapping[str, object]) -> str:
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        uid = metadata.get("uid")
        if isinstance(uid, str):
            return uid
    return ""
