"""Sharded mode: every replica schedules the namespaces it owns, handed over through Leases.

The protocol (docs/architecture.md, "Sharded mode") in one paragraph: each replica holds a
*membership* Lease (``<group>-member-<identity>``) that it renews every retry period; every
replica computes the owner of every namespace from the live members with
``pure.sharding.assign``; whoever an *assignment* Lease (``<group>-ns-<namespace>``) names may
write for that namespace. A replica that is no longer the owner closes the namespace's write
gate at once, waits for its cycles in flight, then clears the assignment; the new owner takes
the assignment by a compare-and-swap on its resourceVersion, only once it is clear, or names a
member whose Lease is gone, or names a member whose Lease did not change for its lease duration
— and then only after deleting that member's Lease *at the version it saw expire*, which fences
it: the member's renewals fail from then on, and its gate (open for ``renew_deadline`` after the
start of its last successful renewal, shorter than the lease duration) closed before.

This module is the effect layer of it: the Lease reads and writes, the monotonic clock and the
round loop. What it decides with is pure (``pure.sharding``). What it asks of the scheduler —
start and stop a namespace's informers, open and close its queue — is :class:`NamespaceHost`.
One module at about 700 lines: the round loop, the Lease calls and the fencing act on one
member's state (the Leases it holds and the versions it saw), and none is used without the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol

from returns.result import Result

from kruntimes.kubeclient.clock import utcnow
from kruntimes.kubeclient.kube import LEASES, ApiError, JSONObject, resource_version_of
from kruntimes.kubeclient.leader import INT32_MAX, WARN_INTERVAL, LeaseTimings, micro_time, timing_problems
from kruntimes.kubeclient.throttle import Throttle
from kruntimes.effects.metrics import ShardHandoff as Handoff
from kruntimes.kubeclient.threads import Supervisor
from kruntimes.kubeclient.workqueue import Clock
from kruntimes.pure import sharding
from kruntimes.pure.sharding import (
    ASSIGNMENT_ROLE,
    GROUP_LABEL,
    MEMBER_ROLE,
    NAMESPACE_LABEL,
    ROLE_LABEL,
    assignment_lease_name,
    member_lease_name,
)

log = logging.getLogger(__name__)

NAMESPACES_PATH: Final = "/api/v1/namespaces"
OBSERVE_FRACTION: Final = 4
"""Member Leases are read ``OBSERVE_FRACTION`` times per retry period, so an expiry is seen
within a quarter of it rather than a whole one."""
EXPIRY_MARGIN: Final = 0.005
"""Seconds after a Lease's expiry on our clock that the round looking for it runs (so the round
sees it expired, not one clock tick early)."""
DRAIN_TIMEOUT: Final = 5.0
"""Seconds a graceful stop waits for the cycles in flight before releasing what it holds."""

@dataclass(frozen=True, slots=True)
class ShardConfig(LeaseTimings):
    """Where the Leases live, the group, and the election timings they reuse."""

    lease_namespace: str
    identity: str
    group: str = sharding.DEFAULT_GROUP
    namespaces: tuple[str, ...] = ()
    """The namespaces to share; empty: every namespace the API server lists."""

    def problems(self) -> tuple[str, ...]:
        found: list[str] = []
        why = sharding.group_problem(self.group)
        if why is not None:
            found.append(f"--shard-group {self.group!r} {why}")
        if not self.lease_namespace:
            found.append("the Lease namespace must not be empty")
        if not self.identity:
            found.append("identity must not be empty")
        found.extend(timing_problems(self.lease_duration, self.renew_deadline, self.retry_period))
        return tuple(found)


class ShardApi(Protocol):
    """What the member needs from ``kube.Kube``."""

    def get(self, path: str) -> Result[JSONObject, ApiError]: ...

    def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]: ...

    def update(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]: ...

    def delete(self, path: str, *, resource_version: str = "") -> Result[JSONObject, ApiError]: ...

    def list(
        self, path: str, params: Mapping[str, str] | None = None, *, page_size: int = 500
    ) -> Result[tuple[tuple[JSONObject, ...], str], ApiError]: ...


class NamespaceHost(Protocol):
    """What a member asks of the scheduler for one namespace (``runner.Scheduler``).

    A round calls ``namespaces_known`` first, then ``watch_namespace`` / ``unwatch_namespace`` for
    what it takes and lets go, then ``settle`` once, so a host that watches every namespace it holds
    through one query lists (or watches again) once a round, not once a namespace."""

    def namespaces_known(self, namespaces: frozenset[str]) -> None:
        """The namespaces the group shares, as this round listed them."""

    def watch_namespace(self, namespace: str) -> None:
        """Watch it (a consistent read of it follows, by the round's ``settle`` at the latest)."""

    def settle(self) -> None:
        """The round's ``watch_namespace`` and ``unwatch_namespace`` calls are over: start the
        lists and watches they ask for."""

    def namespace_synced(self, namespace: str) -> bool:
        """A list of it that started after ``watch_namespace`` is applied."""
        ...

    def open_namespace(self, namespace: str) -> None:
        """The gate is open: forget its reservations, queue its Pending Runs."""

    def close_namespace(self, namespace: str) -> None:
        """The gate is closed: drop its queued and parked Runs."""

    def namespace_busy(self, namespace: str) -> bool:
        """A cycle of the namespace is in flight."""
        ...

    def unwatch_namespace(self, namespace: str) -> None:
        """Stop watching it and forget its objects (gone from the state when this returns)."""


@dataclass(slots=True)
class _Seen:
    """A member Lease as this replica last read it, and when (monotonic) that version was first seen."""

    version: str
    since: float
    holder: str
    duration: float


def _spec(lease: Mapping[str, object]) -> Mapping[str, object]:
    spec = lease.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _holder(lease: Mapping[str, object]) -> str:
    value = _spec(lease).get("holderIdentity")
    return value if isinstance(value, str) else ""


def _labels(lease: Mapping[str, object]) -> Mapping[str, object]:
    metadata = lease.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _meta(obj: Mapping[str, object], key: str) -> str:
    """A text field of ``metadata`` ("" when absent)."""
    metadata = obj.get("metadata")
    value = metadata.get(key) if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) else ""


def _uid(obj: Mapping[str, object]) -> str:
    return _meta(obj, "uid")


def _name(obj: Mapping[str, object]) -> str:
    return _meta(obj, "name")


class ShardMember:
    """One replica's membership, its view of the others, and the namespaces it may write for."""

    def __init__(
        self,
        kube: ShardApi,
        config: ShardConfig,
        host: NamespaceHost,
        *,
        on_handoff: Callable[[Handoff], None] = lambda kind: None,
        clock: Clock = time.monotonic,
        now: Callable[[], datetime] = utcnow,
        supervisor: Supervisor | None = None,
    ) -> None:
        problems = config.problems()
        if problems:
            raise ValueError("invalid sharding settings: " + "; ".join(problems))
        self._kube = kube
        self._config = config
        self._host = host
        self._on_handoff = on_handoff
        self._supervisor = supervisor if supervisor is not None else Supervisor()
        self._clock = clock
        self._now = now
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._collection = LEASES.path(config.lease_namespace)
        self._member_name = member_lease_name(config.group, config.identity)
        self._member: JSONObject | None = None
        """Our membership Lease as last written (``None``: not created yet, or fenced)."""
        self._renewed_at: float | None = None
        """Monotonic instant at which the last successful renewal *started*."""
        self._next_renewal = 0.0
        self._warnings = Throttle(WARN_INTERVAL, clock)
        self._seen: dict[str, _Seen] = {}
        """member Lease name -> what we saw of it."""
        self._held: dict[str, JSONObject] = {}
        """namespace -> its assignment Lease as we last wrote it (we are its holder)."""
        self._syncing: set[str] = set()
        self._leaving: set[str] = set()
        self._open: frozenset[str] = frozenset()
        self._desired: frozenset[str] = frozenset()
        self._live: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        """Serialises rounds with a graceful stop."""

    # --- what the scheduler reads ---------------------------------------------------------

    def may_write(self, namespace: str) -> bool:
        """True only while the namespace is ours and open, and our membership renewal is recent
        enough that nobody can have fenced us (``renew_deadline`` since its start)."""
        renewed = self._renewed_at
        return (
            namespace in self._open
            and renewed is not None
            and self._clock() < renewed + self._config.renew_deadline
            and not self._stop.is_set()
        )

    def accepts(self, namespace: str) -> bool:
        """The namespace is open here (its keys belong in this replica's queue)."""
        return namespace in self._open

    @property
    def joined(self) -> bool:
        """The membership Lease exists and was renewed in time (the others count us)."""
        renewed = self._renewed_at
        return self._member is not None and renewed is not None and self._clock() < renewed + self._config.renew_deadline

    @property
    def owned(self) -> frozenset[str]:
        return self._open

    @property
    def desired(self) -> frozenset[str]:
        return self._desired

    @property
    def members(self) -> int:
        return len(self._live)

    def may_write_any(self) -> bool:
        """Some namespace is open for writes here (the ``leader`` gauge in sharded mode)."""
        return any(self.may_write(namespace) for namespace in self._open)

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Rounds until :meth:`stop`; a round that raises is counted and logged and the next one
        runs, but when every round raised for the renew deadline the exception ends the loop: a
        member that cannot finish a round cannot hand namespaces over as the group expects, so the
        process had better restart (releasing what it holds) than stay a member in name only; the
        supervisor of the loop's thread hears of it.

        A round runs every ``retry_period / OBSERVE_FRACTION``, and also at the instant a member
        Lease we saw expires on our clock (:meth:`next_round`), so a takeover does not wait for
        the next regular round. Between rounds, :meth:`nudge` opens a namespace whose informers
        have just synced, without reading any Lease."""
        interval = self._config.retry_period / OBSERVE_FRACTION
        due = self._clock()
        failing_since: float | None = None  # when the rounds began to raise (None: the last one ran)
        while not self._stop.is_set():
            try:
                if self._clock() >= due:
                    self.round()
                    failing_since = None
                    due = self.next_round(self._clock() + interval)
                else:
                    self.open_synced()
            except Exception as error:
                self._supervisor.skipped("control", "round", None, error)
                tick = self._clock()
                failing_since = tick if failing_since is None else failing_since
                if tick - failing_since >= self._config.renew_deadline:
                    raise
                if due <= tick:  # the round raised: the next one waits its interval, no spinning
                    due = tick + interval
            self._wake.wait(max(0.0, due - self._clock()))
            self._wake.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def nudge(self) -> None:
        """Something a handoff waits for may have happened (a namespace's informers synced): look
        now rather than at the next round. Any thread; returns at once."""
        self._wake.set()

    def next_round(self, regular: float) -> float:
        """When the next round should run: ``regular``, or earlier, just after the first instant a
        live member's Lease, unchanged since we saw it, expires on our clock (a takeover then
        starts at once, not up to a round later)."""
        tick = self._clock()
        expiries = [
            seen.since + seen.duration
            for name, seen in self._seen.items()
            if name != self._member_name and seen.holder and seen.since + seen.duration > tick
        ]
        return min(regular, min(expiries, default=regular) + EXPIRY_MARGIN)

    def open_synced(self) -> None:
        """Open every namespace we hold whose informers have synced (no Lease is read)."""
        with self._lock:
            if self._stop.is_set() or not self.joined:
                return
            self._open_synced()

    def round(self) -> None:
        """Renew when due, read the members, and move namespaces in or out."""
        with self._lock:
            if self._stop.is_set():
                return
            tick = self._clock()
            renewed = False
            if tick >= self._next_renewal:
                self._renew(tick)
                renewed = True
            if self._renewed_at is None or self._clock() >= self._renewed_at + self._config.renew_deadline:
                if self._held or self._syncing or self._open:
                    log.warning("membership renewals failing for the renew deadline; dropping every namespace",
                                extra={"identity": self._config.identity})
                    self._drop_all("lost")
                return
            live = self._observe()
            if live is None:
                return
            changed = live != self._live
            self._live = live
            # a full round (namespaces and assignments read) at every renewal, and at every
            # observation while a handoff is under way: the membership changed, or a namespace
            # is still to take, to open or to let go
            if renewed or changed or self._syncing or self._leaving or self._desired != frozenset(self._held):
                self._rebalance(live)

    def shutdown(self, timeout: float = DRAIN_TIMEOUT) -> None:
        """A graceful stop: close every gate, wait for cycles in flight, release every assignment,
        delete the membership Lease so the others take over at their next round."""
        self.stop()
        with self._lock:
            held = list(self._held)
            self._open = frozenset()
            for namespace in held:
                self._host.close_namespace(namespace)
            deadline = time.monotonic() + timeout
            while any(self._host.namespace_busy(ns) for ns in held) and time.monotonic() < deadline:
                time.sleep(0.02)
            for namespace in held:
                self._release(namespace)
            member = self._member
            if member is not None:
                self._kube.delete(self._member_path(), resource_version=resource_version_of(member))
                self._member = None
            self._renewed_at = None
            for namespace in held:
                self._host.unwatch_namespace(namespace)
            log.info("left the shard group", extra={"identity": self._config.identity, "released": len(held)})

    # --- membership ----------------------------------------------------------------------------

    def _member_path(self) -> str:
        return LEASES.path(self._config.lease_namespace, self._member_name)

    def _renew(self, tick: float) -> None:
        self._next_renewal = tick + self._config.retry_period
        now = micro_time(self._now())
        member = self._member
        if member is None:
            body = self._lease_body(
                None, self._member_name, {ROLE_LABEL: MEMBER_ROLE}, self._config.identity, now, acquire=now
            )
            created = self._kube.create(self._collection, body)
            stored = created.value_or(None)
            if stored is None:
                error = created.failure()
                if error.kind != "already_exists":
                    self._membership_failed("create", error)
                    return
                # our own identity's Lease: a write of ours whose answer was lost, or a restart
                # under a fixed identity; adopt it (nothing is held yet)
                got = self._kube.get(self._member_path()).value_or(None)
                if got is None:
                    return
                member = got
            else:
                self._member, self._renewed_at = stored, tick
                return
        updated = self._kube.update(
            self._member_path(), self._lease_body(member, self._member_name, {ROLE_LABEL: MEMBER_ROLE},
                                                  self._config.identity, now)
        )
        stored = updated.value_or(None)
        if stored is not None:
            if _uid(stored) != _uid(member):
                # A Lease accepts an update of a missing object as a create: another replica had
                # deleted ours (the fence) and this renewal made a new one. Nothing held is ours;
                # the gate opens again (below) only for a member holding nothing.
                log.warning("membership Lease was fenced; dropping every namespace and joining again",
                            extra={"identity": self._config.identity})
                self._drop_all("lost")
            self._member, self._renewed_at = stored, tick
            return
        error = updated.failure()
        if error.kind in ("not_found", "conflict"):
            # another replica deleted our Lease at a version it saw expire (or our own write's
            # answer was lost): nothing we held is ours any more
            log.warning("membership Lease fenced; dropping every namespace and joining again",
                        extra={"identity": self._config.identity, "error": error.kind})
            self._member, self._renewed_at = None, None
            self._drop_all("lost")
            self._next_renewal = tick  # join again at once
            return
        self._membership_failed("update", error)

    def _membership_failed(self, operation: str, error: ApiError) -> None:
        """As the elector's Lease failures: a warning with the cause once a minute per operation
        and kind of error, the rest at debug (a renewal is tried every retry period)."""
        fields = {"lease": self._member_path(), "operation": operation, "error": str(error), "kind": error.kind}
        held = self._warnings.allow(f"{operation}:{error.kind}")
        if held is None:
            log.debug("membership Lease request failed", extra=fields)
        else:
            log.warning("membership Lease request failed; retrying (said at most once a minute)",
                        extra={**fields, "unlogged_since_last": held})

    def _observe(self) -> frozenset[str] | None:
        """The live members (identities), ours included; ``None`` when the list failed."""
        items = self._leases(MEMBER_ROLE)
        if items is None:
            return None
        tick = self._clock()
        current: dict[str, _Seen] = {}
        for lease in items:
            name = _name(lease)
            if name:
                current[name] = self._note(name, lease, tick)
        self._seen = current
        live = {seen.holder for name, seen in current.items() if name != self._member_name and self._alive(seen, tick)}
        live.add(self._config.identity)
        return frozenset(live)

    def _note(self, name: str, lease: Mapping[str, object], tick: float) -> _Seen:
        version = resource_version_of(lease)
        spec = _spec(lease)
        duration = spec.get("leaseDurationSeconds")
        seconds = float(duration) if isinstance(duration, int) and not isinstance(duration, bool) and 0 < duration <= INT32_MAX else (
            self._config.lease_duration
        )
        before = self._seen.get(name)
        since = before.since if before is not None and before.version == version else tick
        return _Seen(version, since, _holder(lease), seconds)

    @staticmethod
    def _alive(seen: _Seen, tick: float) -> bool:
        return bool(seen.holder) and tick < seen.since + seen.duration

    # --- namespaces ------------------------------------------------------------------------------

    def _universe(self) -> tuple[str, ...] | None:
        if self._config.namespaces:
            return self._config.namespaces
        items = self._list(NAMESPACES_PATH, None)
        if items is None:
            return None
        return tuple(sorted(name for name in (_name(ns) for ns in items) if name))

    def _assignments(self) -> dict[str, JSONObject] | None:
        items = self._leases(ASSIGNMENT_ROLE)
        if items is None:
            return None
        out: dict[str, JSONObject] = {}
        for lease in items:
            namespace = _labels(lease).get(NAMESPACE_LABEL)
            if isinstance(namespace, str) and _name(lease) == assignment_lease_name(self._config.group, namespace):
                out[namespace] = lease
        return out

    def _leases(self, role: str) -> tuple[JSONObject, ...] | None:
        """The group's Leases of one role (members or assignments)."""
        return self._list(self._collection, {"labelSelector": f"{GROUP_LABEL}={self._config.group},{ROLE_LABEL}={role}"})

    def _list(self, path: str, params: Mapping[str, str] | None) -> tuple[JSONObject, ...] | None:
        """The items, or ``None`` (logged) when the list failed: a round decides nothing from it."""
        listed = self._kube.list(path, params)
        items = listed.value_or(None)
        if items is None:
            log.warning("a list for sharding failed", extra={"path": path, "error": str(listed.failure())})
            return None
        return items[0]

    def _rebalance(self, live: frozenset[str]) -> None:
        universe = self._universe()
        if universe is None:
            return
        assignments = self._assignments()
        if assignments is None:
            return
        self._host.namespaces_known(frozenset(universe))
        me = self._config.identity
        desired = sharding.owned_by(sharding.assign(universe, live), me)
        self._desired = desired
        # somebody else holds what we think we hold: we must have been fenced; never write there
        for namespace in list(self._held):
            lease = assignments.get(namespace)
            if namespace not in self._leaving and (lease is None or _holder(lease) != me):
                log.warning("a namespace's assignment names another replica; dropping it",
                            extra={"namespace": namespace})
                self._drop(namespace)
                self._on_handoff("lost")
        for namespace in sorted(set(self._held) - desired - self._leaving):
            self._close(namespace)
        for namespace in sorted(self._leaving):
            if not self._host.namespace_busy(namespace):
                if self._release(namespace, delete=namespace not in universe):
                    self._host.unwatch_namespace(namespace)
                    self._on_handoff("released")
        for namespace in sorted(desired - set(self._held)):
            if self._take(namespace, assignments.get(namespace)):
                self._syncing.add(namespace)
                self._host.watch_namespace(namespace)
                self._on_handoff("acquired")
        self._host.settle()
        self._open_synced()

    def _open_synced(self) -> None:
        for namespace in sorted(self._syncing):
            if namespace in self._held and self._host.namespace_synced(namespace):
                self._syncing.discard(namespace)
                self._open = self._open | {namespace}
                self._host.open_namespace(namespace)
                log.info("namespace taken", extra={"namespace": namespace, "identity": self._config.identity})

    def _close(self, namespace: str) -> None:
        """Stop writing for ``namespace`` now; it is released once its cycles in flight end."""
        self._open = self._open - {namespace}
        self._syncing.discard(namespace)
        self._leaving.add(namespace)
        self._host.close_namespace(namespace)
        log.info("namespace moves to another replica; letting go", extra={"namespace": namespace})

    def _drop(self, namespace: str) -> None:
        """Forget ``namespace`` here without touching its assignment (it is not ours any more)."""
        self._open = self._open - {namespace}
        self._syncing.discard(namespace)
        self._leaving.discard(namespace)
        self._held.pop(namespace, None)
        self._host.close_namespace(namespace)
        self._host.unwatch_namespace(namespace)

    def _drop_all(self, kind: Handoff) -> None:
        self._open = frozenset()
        for namespace in list(self._held):
            self._drop(namespace)
            self._on_handoff(kind)
        self._held.clear()
        self._syncing.clear()
        self._leaving.clear()

    def _release(self, namespace: str, *, delete: bool = False) -> bool:
        """Clear (or, for a namespace that no longer exists, delete) our assignment; ``True`` when
        it is not ours any more (done, or somebody else's already)."""
        lease = self._held.get(namespace)
        if lease is None:
            self._leaving.discard(namespace)
            return True
        path = LEASES.path(self._config.lease_namespace, assignment_lease_name(self._config.group, namespace))
        if delete:
            written = self._kube.delete(path, resource_version=resource_version_of(lease))
        else:
            now = micro_time(self._now())
            written = self._kube.update(path, self._lease_body(lease, _name(lease), {}, "", now))
        if written.value_or(None) is None and written.failure().kind not in ("not_found", "conflict"):
            log.warning("releasing a namespace failed; trying again", extra={"namespace": namespace,
                                                                              "error": str(written.failure())})
            return False
        self._held.pop(namespace, None)
        self._leaving.discard(namespace)
        log.info("namespace released", extra={"namespace": namespace})
        return True

    def _take(self, namespace: str, lease: JSONObject | None) -> bool:
        """Become the assignment's holder if the protocol allows it now; ``True`` when we did."""
        group, me = self._config.group, self._config.identity
        name = assignment_lease_name(group, namespace)
        now = micro_time(self._now())
        labels = {ROLE_LABEL: ASSIGNMENT_ROLE, NAMESPACE_LABEL: namespace}
        if lease is None:
            created = self._kube.create(self._collection, self._lease_body(None, name, labels, me, now, acquire=now))
            stored = created.value_or(None)
            if stored is None:
                log.info("creating a namespace assignment failed", extra={"namespace": namespace,
                                                                          "error": created.failure().kind})
                return False
            self._held[namespace] = stored
            return True
        holder = _holder(lease)
        if holder and holder != me and not self._gone_or_fenced(holder):
            return False
        updated = self._kube.update(
            LEASES.path(self._config.lease_namespace, name), self._lease_body(lease, name, labels, me, now, acquire=now,
                                                                               transition=holder != me)
        )
        stored = updated.value_or(None)
        if stored is None:
            log.info("taking a namespace failed", extra={"namespace": namespace, "error": updated.failure().kind})
            return False
        self._held[namespace] = stored
        return True

    def _gone_or_fenced(self, holder: str) -> bool:
        """Whether ``holder`` cannot be writing: its membership Lease is gone, or it expired on our
        clock and we deleted it at that version (the fence)."""
        name = member_lease_name(self._config.group, holder)
        path = LEASES.path(self._config.lease_namespace, name)
        got = self._kube.get(path)  # read after the assignment: a claim we saw implies a membership
        lease = got.value_or(None)
        if lease is None:
            return got.failure().kind == "not_found"
        tick = self._clock()
        seen = self._note(name, lease, tick)
        self._seen[name] = seen
        if _holder(lease) != holder:
            return False  # another identity under the same name: leave it alone
        if self._alive(seen, tick):
            return False
        deleted = self._kube.delete(path, resource_version=seen.version)
        if deleted.value_or(None) is None:
            kind = deleted.failure().kind
            if kind != "not_found":
                log.info("fencing an expired member failed", extra={"error": kind})
                return False
        self._seen.pop(name, None)
        log.warning("fenced a member whose Lease expired", extra={"member": holder})
        self._on_handoff("fenced")
        return True

    # --- bodies ------------------------------------------------------------------------------------

    def _lease_body(
        self,
        current: Mapping[str, object] | None,
        name: str,
        labels: Mapping[str, str],
        holder: str,
        now: str,
        *,
        acquire: str | None = None,
        transition: bool = False,
    ) -> dict[str, object]:
        duration = max(1, round(self._config.lease_duration))
        if current is None:
            spec: dict[str, object] = {"leaseDurationSeconds": duration, "renewTime": now, "leaseTransitions": 0}
            if holder:
                spec["holderIdentity"] = holder
            if acquire is not None:
                spec["acquireTime"] = acquire
            return {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": self._config.lease_namespace,
                    "labels": {GROUP_LABEL: self._config.group, **labels},
                },
                "spec": spec,
            }
        body = dict(current)
        merged = dict(_spec(current))
        merged.update({"leaseDurationSeconds": duration, "renewTime": now})
        if holder:
            merged["holderIdentity"] = holder
        else:
            merged.pop("holderIdentity", None)
        if acquire is not None:
            merged["acquireTime"] = acquire
        if transition:
            count = merged.get("leaseTransitions")
            merged["leaseTransitions"] = (count if isinstance(count, int) else 0) + 1
        body["spec"] = merged
        return body

