"""The invariant checker: replay a dev cluster's write history and judge the scheduler by it.

It reads every committed object version in commit order (``cluster.history()``)
and checks the scheduler's promises (docs/reliability.md):

``capacity``
    At every scheduler bind write, the Runs bound to that pod — every Run whose
    committed version is *active* (SPEC §1: phase Scheduled/Running/Ready and an
    ``assignedPod``) on that very pod (its ``assignedPodUID`` is the pod's, or
    empty: Runs bound to a former pod of the name count nothing) — fit the pod's
    capacity as it stood at that
    resourceVersion (SPEC §1 annotations, default ``runs: 2``; SPEC §2
    requests; SPEC §4 ``fits``). The pod must exist, carry the Run's
    ``runtime`` label and the UID the bind wrote. A bind that only fits a pod
    version committed within ``race_window`` seconds before it (the pod changed
    or vanished while the bind was in flight: no scheduler can prevent that) is
    counted as *raced*, not as a violation.
``double_bind``
    No Run is bound by the scheduler twice without a version in between that
    resets it to Pending (an empty phase counts).
``final_state``
    In the last state: every Pending Run that the pure planner would bind
    now (a pod has room) is a violation (it should have been bound); every
    other Pending Run must carry exactly the SPEC §7 wait message the planner
    gives for it (one of the four forms of :mod:`kruntimes.pure.model.messages`);
    one the planner fails or cancels should have been terminated; and every
    terminal status the scheduler wrote carries a reason from the closed set
    and a bounded message.
``write_discipline``
    Every scheduler write on ``runs`` is a ``patch`` of ``runs/status`` whose
    previous committed version was Pending — the dev server rejects a stale
    ``resourceVersion`` with 409, so a write that overwrote anything else was
    sent without the version it planned from. Writes on other resources are
    only Events and the leader-election Lease. (The history does not record the
    request's precondition itself; see docs/reliability.md.)
``leader_only``
    When the history holds the leader-election Lease, every scheduler write —
    Run status writes and Event creates and patches alike, anything but the
    Lease itself — comes from the Lease's holder at that point of the commit
    order: standbys and deposed leaders never write (SPEC §10). "Held" is the
    Lease as the server stored it: the ``holderIdentity`` of its latest version
    committed before the write (empty after a release, or before the Lease
    exists). Neither the Lease's ``renewTime`` nor any clock is consulted: the
    server never expires a Lease, a standby takes it by writing it, and from
    that write on the old holder's writes are violations.
``shard_owner``
    When the history holds shard Leases (sharded mode, ``--shard-by-namespace``:
    Leases labelled ``kruntimes.io/shard-group``), one writer per namespace at
    every instant: every scheduler write in namespace ``ns`` — Run status
    writes and Event creates and patches alike, anything but a Lease — comes
    from the owner of ``ns`` at that point of the commit order. The owner is the
    ``holderIdentity`` of the latest version of the assignment Lease
    ``<group>-ns-<ns>`` (label ``kruntimes.io/shard-role: assignment``; nobody
    before it exists, after a release or after its deletion), and only while
    the owner's membership Lease (label ``kruntimes.io/shard-role: member``
    whose ``holderIdentity`` is the owner) has not been deleted since that
    assignment version was committed: a fenced replica owns nothing it claimed
    before the fence, even before anyone takes its namespaces over. As for
    ``leader_only``, no clock is consulted: the server never expires a Lease.

Scheduler writes are recognised by their User-Agent (``kruntimes-scheduler/<identity>``).
This is a purely computational module: it imports :mod:`kruntimes.pure` only.

One module at about 700 lines: every promise is checked in one pass over the history (``_Replay``),
on the running state they share — the Runs and their bindings, the Leases and their holders, each
writer's writes — so no check stands alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final, Literal, TypeAlias

from returns.pipeline import is_successful

from kruntimes.pure.model import messages
from kruntimes.pure.state.cluster import from_objects
from kruntimes.pure.readers.kube import capacity_from_annotations, decode_pod, decode_requests, decode_run, decode_workspace
from kruntimes.pure.planner import plan_cycle
from kruntimes.pure.ledger import EMPTY_LEDGER
from kruntimes.pure.model.objects import (
    ACTIVE_PHASES,
    CANCELLED,
    DEFAULT_CONFIG,
    FAILED,
    PENDING,
    RUNTIME_LABEL,
    SCHEDULED,
    Resources,
    Run,
    RunKey,
    RuntimePod,
    SchedulerConfig,
    Workspace,
    frozen_labels,
)
from kruntimes.pure.model.plan import Bind, Cancel, Delay, Fail, Skip, Wait
from kruntimes.pure.model.quantity import Amount
from kruntimes.pure.snapshot import take
from kruntimes.verify.history import Write

Invariant: TypeAlias = Literal["capacity", "double_bind", "final_state", "write_discipline", "leader_only", "shard_owner"]
INVARIANTS: Final[tuple[Invariant, ...]] = ("capacity", "double_bind", "final_state", "write_discipline", "leader_only", "shard_owner")

SCHEDULER_AGENT: Final = "kruntimes-scheduler"
LEASE_NAME: Final = "kruntimes-scheduler"
TERMINAL_REASONS: Final = frozenset(
    {
        messages.REASON_CANCELLED,
        messages.REASON_INVALID_RESOURCES,
        messages.REASON_INVALID_AFFINITY,
        messages.REASON_INVALID_SPEC,
    }
)
MAX_MESSAGE_BYTES: Final = 1024
_ALLOWED_OTHER_WRITES: Final = {
    ("", "events"): frozenset({"create", "patch", "update"}),
    ("events.k8s.io", "events"): frozenset({"create", "patch", "update"}),
    ("coordination.k8s.io", "leases"): frozenset({"create", "update", "patch"}),
}
SHARD_GROUP_LABEL: Final = "kruntimes.io/shard-group"
SHARD_ROLE_LABEL: Final = "kruntimes.io/shard-role"
SHARD_NAMESPACE_LABEL: Final = "kruntimes.io/shard-namespace"
SHARD_MEMBER: Final = "member"
SHARD_ASSIGNMENT: Final = "assignment"
_SHARD_LEASE_WRITES: Final = frozenset({"create", "update", "patch", "delete"})
"""Sharded mode deletes membership Leases too: a graceful stop deletes its own, a fence an expired one."""


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: Invariant
    resource_version: int
    run: str
    """``namespace/name`` of the Run concerned ("" when none)."""
    pod: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] rv={self.resource_version} run={self.run} pod={self.pod}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Report:
    """What the checker saw and what it found; ``ok`` when no invariant was violated."""

    violations: tuple[Violation, ...]
    checked: Mapping[str, int]
    """How many checks each invariant made (binds, writes, Runs at the end...)."""
    raced_binds: int
    """Binds that fit only a pod version from within the race window (not violations)."""
    scheduler_writes: int
    binds: int
    runs: int
    records: int
    raced: tuple[Violation, ...] = ()
    """Those binds, with what would have been the violation (for inspection)."""
    writers: Mapping[str, int] = field(default_factory=dict)
    """Scheduler writes by User-Agent."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def count(self, invariant: Invariant) -> int:
        return sum(1 for v in self.violations if v.invariant == invariant)

    def counts(self) -> dict[str, int]:
        return {name: self.count(name) for name in INVARIANTS}

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: counts per invariant, and the first few violations."""
        return {
            "records": self.records,
            "runs": self.runs,
            "scheduler_writes": self.scheduler_writes,
            "binds": self.binds,
            "raced_binds": self.raced_binds,
            "checked": dict(self.checked),
            "violations": self.counts(),
            "writers": dict(self.writers),
            "first_violations": [str(v) for v in self.violations[:20]],
            "first_raced": [str(v) for v in self.raced[:5]],
        }


@dataclass(frozen=True, slots=True)
class CheckOptions:
    scheduler_agent: str = SCHEDULER_AGENT
    """User-Agent prefix of the scheduler's requests (``<prefix>`` or ``<prefix>/<identity>``)."""
    lease_name: str = LEASE_NAME
    race_window: float = 0.0
    """Seconds before a bind in which a changed or vanished pod excuses an overcommit (see module doc)."""
    check_final: bool = True
    final_now: datetime | None = None
    """The instant of the final-state check (heartbeat freshness); default: the last record's time."""
    config: SchedulerConfig = DEFAULT_CONFIG


# --- small readers of raw objects ---------------------------------------------------------


def _get(obj: object, *path: str) -> object:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _text(obj: object, *path: str) -> str:
    value = _get(obj, *path)
    return value if isinstance(value, str) else ""


def _is_active(obj: Mapping[str, Any]) -> bool:
    return _text(obj, "status", "phase") in ACTIVE_PHASES and _text(obj, "status", "assignedPod") != ""


def _is_pending(obj: Mapping[str, Any] | None) -> bool:
    return obj is not None and _text(obj, "status", "phase") in ("", PENDING)


def _requests(obj: Mapping[str, Any]) -> tuple[Resources, str | None]:
    return decode_requests(_get(obj, "spec", "resources", "requests"))


_MAX_VERSION_DIGITS: Final = 20
"""An etcd revision is a uint64: at most 20 digits."""


def _version_number(text: str) -> int:
    """A resourceVersion as the number a violation reports; 0 when it is not an etcd revision."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= _MAX_VERSION_DIGITS else 0


def _run_label(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _is_lease(w: Write) -> bool:
    return w.resource.group == "coordination.k8s.io" and w.resource.plural == "leases"


def _shard_role(w: Write) -> str | None:
    """The ``kruntimes.io/shard-role`` of a shard Lease ("" when it has none); ``None`` for anything else."""
    if not _is_lease(w):
        return None
    labels = _get(w.object, "metadata", "labels")
    if not isinstance(labels, Mapping) or not isinstance(labels.get(SHARD_GROUP_LABEL), str):
        return None
    role = labels.get(SHARD_ROLE_LABEL)
    return role if isinstance(role, str) else ""


def _assigned_namespace(w: Write) -> str:
    """The namespace an assignment Lease ``<group>-ns-<namespace>`` is for (its label, else its name)."""
    labels = _get(w.object, "metadata", "labels")
    group = labels.get(SHARD_GROUP_LABEL) if isinstance(labels, Mapping) else None
    named = labels.get(SHARD_NAMESPACE_LABEL) if isinstance(labels, Mapping) else None
    if isinstance(named, str) and named:
        return named
    prefix = f"{group}-ns-"
    return w.name[len(prefix):] if w.name.startswith(prefix) else ""


def _subject(w: Write) -> tuple[str, str, str]:
    """(``namespace/name`` of the Run, pod, what was written) of a scheduler write, for a violation."""
    plural = w.resource.plural
    if plural == "runs":
        run, pod = _run_label(w.namespace, w.name), _text(w.object, "status", "assignedPod")
    else:
        involved = _get(w.object, "involvedObject")
        run = _run_label(_text(involved, "namespace"), _text(involved, "name")) if isinstance(involved, Mapping) and _text(involved, "kind") == "Run" else ""
        pod = ""
    return run, pod, f"{w.verb} {plural}" + (f"/{w.subresource}" if w.subresource else "")


@dataclass(frozen=True, slots=True)
class _PodVersion:
    time: float
    uid: str
    runtime: str
    capacity: Resources


def _pod_version(obj: Mapping[str, Any], time: float) -> _PodVersion:
    annotations = _get(obj, "metadata", "annotations")
    labels = _get(obj, "metadata", "labels")
    strings = {k: v for k, v in annotations.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(annotations, Mapping) else {}
    runtime = labels.get(RUNTIME_LABEL, "") if isinstance(labels, Mapping) else ""
    return _PodVersion(time, _text(obj, "metadata", "uid"), runtime if isinstance(runtime, str) else "", capacity_from_annotations(frozen_labels(strings)))


def _fits(capacity: Resources, usage: Mapping[str, Amount], requests: Resources) -> str | None:
    """``None`` when ``usage`` (which already includes ``requests``) fits; else the first resource that does not."""
    for resource, amount in sorted(requests.items()):
        if amount <= 0:
            continue
        have = capacity.get(resource)
        if have is None or usage.get(resource, 0) > have:
            return resource
    return None


# --- the checker --------------------------------------------------------------------------


class _Replay:
    """The state of one replay; ``check_history`` drives it record by record."""

    def __init__(self, options: CheckOptions) -> None:
        self.options = options
        self.violations: list[Violation] = []
        self.checked: dict[str, int] = {name: 0 for name in INVARIANTS}
        self.raced: list[Violation] = []
        self.scheduler_writes = 0
        self.binds = 0
        self.writers: dict[str, int] = {}
        self.runs: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.pods: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.workspaces: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.pod_versions: dict[tuple[str, str], deque[_PodVersion | None]] = {}
        self.pod_times: dict[tuple[str, str], deque[float]] = {}
        self.active: dict[tuple[str, str], tuple[str, str, Resources]] = {}
        """(namespace, run name) -> (assignedPod, assignedPodUID, requests) of the active Runs."""
        self.usage: dict[tuple[str, str, str], dict[str, Amount]] = {}
        """(namespace, pod name, assignedPodUID) -> the requests of the active Runs bound so."""
        self.bound: set[tuple[str, str]] = set()
        """Runs (namespace, uid) bound by the scheduler and not reset since."""
        self.last_status_writer: dict[tuple[str, str], str] = {}
        self.elected = False
        """Whether the history holds the election Lease at all: then every scheduler write is judged."""
        self.lease_holder = ""
        self.sharded = False
        """Whether the history holds shard Leases at all: then every scheduler write is judged by its namespace's owner."""
        self.assignments: dict[str, tuple[str, int]] = {}
        """Namespace -> (holder of its assignment Lease, resourceVersion of that assignment version)."""
        self.member_deleted: dict[str, int] = {}
        """Identity -> resourceVersion of the latest deletion of its membership Lease."""
        self.last_time = 0.0

    def violate(self, invariant: Invariant, rv: int, run: str, pod: str, detail: str) -> None:
        self.violations.append(Violation(invariant, rv, run, pod, detail))

    def is_scheduler(self, agent: str) -> bool:
        prefix = self.options.scheduler_agent
        return agent == prefix or agent.startswith(prefix + "/")

    # --- records ---

    def is_election_lease(self, w: Write) -> bool:
        return _is_lease(w) and w.name == self.options.lease_name and _shard_role(w) is None

    def record(self, w: Write) -> None:
        self.last_time = max(self.last_time, w.time)
        group, plural = w.resource.group, w.resource.plural
        scheduler = self.is_scheduler(w.user_agent)
        if scheduler:
            self.scheduler_writes += 1
            self.writers[w.user_agent] = self.writers.get(w.user_agent, 0) + 1
            if self.elected and not self.is_election_lease(w):
                self.check_leader(w)
            if self.sharded and not _is_lease(w):
                self.check_shard_owner(w)
        if group == "kruntimes.io" and plural == "runs":
            self.run_record(w, scheduler)
        elif group == "" and plural == "pods":
            self.pod_record(w)
        elif group == "kruntimes.io" and plural == "persistentworkspaces":
            key = (w.namespace, w.name)
            if w.event_type == "DELETED":
                self.workspaces.pop(key, None)
            else:
                self.workspaces[key] = w.object
        elif self.is_election_lease(w):
            self.lease_holder = "" if w.event_type == "DELETED" else _text(w.object, "spec", "holderIdentity")
        else:
            self.shard_lease_record(w)
        if scheduler and not (group == "kruntimes.io" and plural == "runs"):
            self.checked["write_discipline"] += 1
            allowed = _SHARD_LEASE_WRITES if _shard_role(w) is not None else _ALLOWED_OTHER_WRITES.get((group, plural), frozenset())
            if w.verb not in allowed:
                what = f"{w.verb} {plural}" + (f"/{w.subresource}" if w.subresource else "") + (f".{group}" if group else "")
                self.violate("write_discipline", w.resource_version, "", "", f"unexpected scheduler write: {what}")

    def check_leader(self, w: Write) -> None:
        """``leader_only``: the writer's identity (``<agent>/<identity>``) is the Lease holder right now."""
        identity = w.user_agent.partition("/")[2]
        if not identity:
            return  # a scheduler without an identity does not elect: nothing to compare
        self.checked["leader_only"] += 1
        if identity == self.lease_holder:
            return
        run, pod, what = _subject(w)
        holder = self.lease_holder or "(nobody)"
        self.violate("leader_only", w.resource_version, run, pod, f"{what} by {identity!r} while the lease was held by {holder!r}")

    def shard_lease_record(self, w: Write) -> None:
        """Follow the assignment holders and the deletions of membership Leases."""
        role = _shard_role(w)
        if role == SHARD_MEMBER and w.event_type == "DELETED":
            identity = _text(w.object, "spec", "holderIdentity")
            if identity:
                self.member_deleted[identity] = w.resource_version
        elif role == SHARD_ASSIGNMENT:
            namespace = _assigned_namespace(w)
            if namespace:
                holder = "" if w.event_type == "DELETED" else _text(w.object, "spec", "holderIdentity")
                self.assignments[namespace] = (holder, w.resource_version)

    def check_shard_owner(self, w: Write) -> None:
        """``shard_owner``: the writer holds its namespace's assignment, and its membership was not deleted since."""
        identity = w.user_agent.partition("/")[2]
        self.checked["shard_owner"] += 1
        holder, since = self.assignments.get(w.namespace, ("", 0))
        fenced_at = self.member_deleted.get(identity, -1) if identity else -1
        if identity and identity == holder and fenced_at < since:
            return
        run, pod, what = _subject(w)
        writer = identity or "(no identity)"
        if identity and identity == holder:
            detail = (f"{what} in namespace {w.namespace!r} by {writer!r}, whose membership Lease was deleted at rv={fenced_at}"
                      f" after it took the namespace at rv={since}")
        else:
            detail = f"{what} in namespace {w.namespace!r} by {writer!r} while the namespace was assigned to {holder or '(nobody)'!r}"
        self.violate("shard_owner", w.resource_version, run, pod, detail)

    def pod_record(self, w: Write) -> None:
        key = (w.namespace, w.name)
        versions = self.pod_versions.setdefault(key, deque())
        if w.event_type == "DELETED":
            self.pods.pop(key, None)
            versions.append(None)
        else:
            self.pods[key] = w.object
            versions.append(_pod_version(w.object, w.time))
        times = self.pod_times.setdefault(key, deque())
        times.append(w.time)
        # keep what the race window can still ask for: every version newer than the window, and the one before
        horizon = w.time - max(self.options.race_window, 0.0)
        while len(times) > 2 and times[1] < horizon:
            times.popleft()
            versions.popleft()

    def _charge(self, key: tuple[str, str], sign: int) -> None:
        entry = self.active.get(key)
        if entry is None:
            return
        pod, pod_uid, requests = entry
        usage = self.usage.setdefault((key[0], pod, pod_uid), {})
        for resource, amount in requests.items():
            usage[resource] = usage.get(resource, 0) + sign * amount

    def run_record(self, w: Write, scheduler: bool) -> None:
        key = (w.namespace, w.name)
        label = _run_label(w.namespace, w.name)
        previous = self.runs.get(key)
        obj = w.object
        uid = _text(obj, "metadata", "uid")
        if w.subresource == "status":
            self.last_status_writer[key] = w.user_agent
        elif w.event_type == "ADDED":
            self.last_status_writer.pop(key, None)
        if scheduler:
            self.scheduler_run_write(w, previous, label)
        # replace this Run's contribution to usage
        self._charge(key, -1)
        self.active.pop(key, None)
        if w.event_type == "DELETED":
            self.runs.pop(key, None)
            self.bound.discard((w.namespace, uid))
            return
        self.runs[key] = obj
        if _is_active(obj):
            self.active[key] = (_text(obj, "status", "assignedPod"), _text(obj, "status", "assignedPodUID"), _requests(obj)[0])
            self._charge(key, +1)
        if scheduler and _text(obj, "status", "phase") == SCHEDULED and _text(obj, "status", "assignedPod"):
            self.check_bind(w, label, uid)
        elif _is_pending(obj):
            self.bound.discard((w.namespace, uid))

    def scheduler_run_write(self, w: Write, previous: Mapping[str, Any] | None, label: str) -> None:
        rv = w.resource_version
        pod = _text(w.object, "status", "assignedPod")
        self.checked["write_discipline"] += 1
        if w.verb != "patch" or w.subresource != "status":
            what = w.verb + (f" runs/{w.subresource}" if w.subresource else " runs")
            self.violate("write_discipline", rv, label, pod, f"scheduler wrote a Run with {what}, not a patch of runs/status")
        elif previous is None:
            self.violate("write_discipline", rv, label, pod, "scheduler wrote the status of a Run the history never created")
        elif not _is_pending(previous):
            phase = _text(previous, "status", "phase")
            prev_rv = _text(previous, "metadata", "resourceVersion")
            self.violate(
                "write_discipline", rv, label, pod,
                f"scheduler overwrote version {prev_rv} in phase {phase!r}: the write did not carry the version it planned from",
            )

    def check_bind(self, w: Write, label: str, uid: str) -> None:
        rv = w.resource_version
        obj = w.object
        namespace = w.namespace
        pod = _text(obj, "status", "assignedPod")
        pod_uid = _text(obj, "status", "assignedPodUID")
        self.binds += 1
        self.checked["double_bind"] += 1
        if (namespace, uid) in self.bound:
            self.violate("double_bind", rv, label, pod, "bound again without being reset to Pending in between")
        self.bound.add((namespace, uid))
        self.checked["capacity"] += 1
        requests, error = _requests(obj)
        if error is not None:
            self.violate("capacity", rv, label, pod, "bound a Run whose requests are invalid")
            return
        runtime = _text(obj, "spec", "runtime")
        current = self.pods.get((namespace, pod))
        usage = self._usage_on(namespace, pod, pod_uid or (_text(current, "metadata", "uid") if current is not None else ""))
        problem = self._bind_problem(
            _pod_version(current, w.time) if current is not None else None, runtime, pod_uid, usage, requests
        )
        if problem is None:
            return
        window = self.options.race_window
        if window > 0 and any(
            version is not None and self._bind_problem(version, runtime, pod_uid, usage, requests) is None
            for version in self._versions_within(namespace, pod, w.time - window)
        ):
            last_change = max((t for t in self.pod_times.get((namespace, pod), ()) if t <= w.time), default=w.time)
            self.raced.append(Violation("capacity", rv, label, pod, f"{problem} (the pod changed {w.time - last_change:.3f}s before)"))
            return
        self.violate("capacity", rv, label, pod, problem)

    def _usage_on(self, namespace: str, pod: str, pod_uid: str) -> dict[str, Amount]:
        """SPEC §1: what the active Runs use on the pod of that name with ``pod_uid`` (those bound
        by name alone and those bound to that uid)."""
        total = dict(self.usage.get((namespace, pod, ""), {}))
        if pod_uid:
            for resource, amount in self.usage.get((namespace, pod, pod_uid), {}).items():
                total[resource] = total.get(resource, 0) + amount
        return total

    def _versions_within(self, namespace: str, pod: str, since: float) -> list[_PodVersion | None]:
        versions = list(self.pod_versions.get((namespace, pod), ()))
        times = list(self.pod_times.get((namespace, pod), ()))
        chosen: list[_PodVersion | None] = []
        for index, (version, at) in enumerate(zip(versions, times)):
            superseded_before = index + 1 < len(times) and times[index + 1] < since
            if at >= since or not superseded_before:
                chosen.append(version)
        return chosen

    @staticmethod
    def _bind_problem(
        version: _PodVersion | None, runtime: str, pod_uid: str, usage: Mapping[str, Amount], requests: Resources
    ) -> str | None:
        if version is None:
            return "bound to a pod that does not exist"
        if version.runtime != runtime:
            return "bound to a pod of another runtime"
        if pod_uid and version.uid and pod_uid != version.uid:
            return "bound to a pod UID that is not the pod's current UID"
        over = _fits(version.capacity, usage, requests)
        if over is not None:
            used = usage.get(over, 0)
            have = version.capacity.get(over)
            return f"overcommitted {over!r}: usage {used} > capacity {have if have is not None else 'none'}"
        return None

    # --- the end ---

    def final(self) -> None:
        now = self.options.final_now or datetime.fromtimestamp(self.last_time, timezone.utc)
        for key, run_obj in self.runs.items():
            if _text(run_obj, "status", "phase") in (FAILED, CANCELLED) and self.is_scheduler(self.last_status_writer.get(key, "")):
                self.checked["final_state"] += 1
                self._check_terminal(run_obj, _run_label(*key))
        found, judged = _pending_check(self.runs.values(), self.pods.values(), self.workspaces.values(), now, self.options.config)
        self.checked["final_state"] += judged
        self.violations.extend(found)

    def _check_terminal(self, run_obj: Mapping[str, Any], label: str) -> None:
        rv = _version_number(_text(run_obj, "metadata", "resourceVersion"))
        conditions = _get(run_obj, "status", "conditions")
        completed = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == messages.CONDITION_COMPLETED), None) if isinstance(conditions, list) else None
        reason = _text(completed, "reason")
        if reason not in TERMINAL_REASONS:
            self.violate("final_state", rv, label, "", f"terminal status with a reason outside the closed set: {reason[:100]!r}")
        size = len(_text(run_obj, "status", "message").encode())
        if size > MAX_MESSAGE_BYTES:
            self.violate("final_state", rv, label, "", f"terminal message of {size} bytes")


def _pending_check(
    run_objs: Iterable[Mapping[str, Any]],
    pod_objs: Iterable[Mapping[str, Any]],
    workspace_objs: Iterable[Mapping[str, Any]],
    now: datetime,
    config: SchedulerConfig,
) -> tuple[list[Violation], int]:
    """Judge every Pending Run of a final state with the pure planner (see ``final_state``)."""
    violations: list[Violation] = []
    decoded_runs: list[Run] = []
    objects: list[Run | RuntimePod | Workspace] = []
    for run_obj in run_objs:
        run_result = decode_run(run_obj)
        if is_successful(run_result):
            decoded_runs.append(run_result.unwrap())
    objects.extend(decoded_runs)
    for pod_obj in pod_objs:
        pod_result = decode_pod(pod_obj)
        if is_successful(pod_result):
            objects.append(pod_result.unwrap())
    for ws_obj in workspace_objs:
        ws_result = decode_workspace(ws_obj)
        if is_successful(ws_result):
            objects.append(ws_result.unwrap())
    state = from_objects(objects)
    judged = 0
    for run in decoded_runs:
        status = run.status
        if not status.pending or not run.runtime:
            continue
        judged += 1
        label = _run_label(run.namespace, run.name)
        rv = _version_number(run.resource_version)
        planned = plan_cycle(take(state, EMPTY_LEDGER, RunKey(run.namespace, run.name), now, config))
        if not is_successful(planned):
            violations.append(Violation("final_state", rv, label, "", f"the planner errs on this Run: {planned.failure().message}"))
            continue
        plan = planned.unwrap()
        if isinstance(plan, Bind):
            violations.append(Violation("final_state", rv, label, plan.pod, "still Pending although a pod has room for it"))
        elif isinstance(plan, Wait):
            if status.message != plan.message:
                kind = "a stale wait message" if status.message in _wait_forms(run) else "no truthful wait message"
                violations.append(
                    Violation("final_state", rv, label, "", f"Pending with {kind}: {status.message[:200]!r}, expected {plan.message!r}")
                )
        elif isinstance(plan, (Fail, Cancel)):
            violations.append(Violation("final_state", rv, label, "", f"still Pending although it should be terminal ({plan.reason})"))
        elif isinstance(plan, (Delay, Skip)):
            pass
    return violations, judged


def pending_violations(
    run_objs: Iterable[Mapping[str, Any]],
    pod_objs: Iterable[Mapping[str, Any]],
    workspace_objs: Iterable[Mapping[str, Any]],
    now: datetime,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> list[Violation]:
    """The ``final_state`` violations of the Pending Runs among these raw objects (for polling until settled)."""
    return _pending_check(run_objs, pod_objs, workspace_objs, now, config)[0]


def _wait_forms(run: Run) -> frozenset[str]:
    """The four SPEC §7 wait messages this Run could carry."""
    forms = {
        messages.waiting_for_pods(run.runtime),
        messages.waiting_for_affinity(run.runtime),
        messages.waiting_for_anti_affinity(run.runtime),
    }
    if run.workspace is not None:
        forms.add(messages.waiting_for_workspace(run.workspace.name, run.runtime))
    return frozenset(forms)


def check_history(records: Iterable[Write], options: CheckOptions = CheckOptions()) -> Report:
    """Replay ``records`` (commit order) and check every invariant; see the module docstring."""
    history = records if isinstance(records, Sequence) else list(records)
    replay = _Replay(options)
    # a write made before the Lease first appears is judged too (nobody held it then)
    replay.elected = any(replay.is_election_lease(w) for w in history)
    replay.sharded = any(_shard_role(w) is not None for w in history)
    count = 0
    for record in history:
        replay.record(record)
        count += 1
    if options.check_final:
        replay.final()
    return Report(
        violations=tuple(replay.violations),
        checked=dict(replay.checked),
        raced_binds=len(replay.raced),
        raced=tuple(replay.raced),
        scheduler_writes=replay.scheduler_writes,
        binds=replay.binds,
        runs=len(replay.runs),
        records=count,
        writers=dict(replay.writers),
    )
