"""The scheduler's view of the cluster: immutable records decoded from JSON.

Hot loops iterate tuples of these slotted, frozen records; small maps (labels,
resources) are read-only ``Mapping`` views built once at decode time, because
the planner reads them per pod per cycle and a plain dict lookup is many times
faster than a persistent map's. Nothing here mutates after construction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Final, Literal, NamedTuple, TypeAlias

from kruntimes.pure.model.quantity import Amount

# --- wire constants -------------------------------------------------------

GROUP: Final = "kruntimes.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
RUNTIME_LABEL: Final = "runtime"
CAPACITY_ANNOTATION_PREFIX: Final = "kruntimes.io/capacity."
HEARTBEAT_CONDITION: Final = "kruntimes.io/RuntimedReady"
TOPOLOGY_KEY: Final = "kruntimes.io/runtime-pod"
WORKSPACE_KIND: Final = "PersistentWorkspace"
WORKSPACE_MODE_LOCAL: Final = "RuntimePodLocal"
RUNS_RESOURCE: Final = "runs"
DEFAULT_CAPACITY: Final[Mapping[str, Amount]] = MappingProxyType({RUNS_RESOURCE: 2})

PENDING: Final = "Pending"
SCHEDULED: Final = "Scheduled"
RUNNING: Final = "Running"
READY: Final = "Ready"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
TIMEOUT: Final = "Timeout"
CANCELLED: Final = "Cancelled"
ACTIVE_PHASES: Final = frozenset({SCHEDULED, RUNNING, READY})

Labels: TypeAlias = Mapping[str, str]
Resources: TypeAlias = Mapping[str, Amount]

EMPTY_LABELS: Final[Labels] = MappingProxyType({})
EMPTY_RESOURCES: Final[Resources] = MappingProxyType({})


def frozen_labels(items: Mapping[str, str]) -> Labels:
    """A read-only copy of ``items``, sorted by key so equal maps print alike."""
    return MappingProxyType(dict(sorted(items.items())))


def frozen_resources(items: Mapping[str, Amount]) -> Resources:
    """A read-only copy of ``items``, sorted by resource name."""
    return MappingProxyType(dict(sorted(items.items())))


class RunKey(NamedTuple):
    """The work-queue key of a Run: ``namespace/name``."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @staticmethod
    def parse(text: str) -> RunKey | None:
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name or "/" in name:
            return None
        return RunKey(namespace, name)


# --- conditions -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Condition:
    """A status condition as Kubernetes writes it (``metav1.Condition`` shape)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    last_probe_time: datetime | None = None


def first_condition(conditions: tuple[Condition, ...], type_: str) -> Condition | None:
    """The first condition of ``type_``, as Kubernetes readers take it."""
    for condition in conditions:
        if condition.type == type_:
            return condition
    return None


# --- Runtime Pods -------------------------------------------------------------

EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND: Final = timedelta(microseconds=1)
NEVER_US: Final = -(1 << 62)
"""An ``available_probe_us`` below every cutoff: the pod is not available whatever the time."""


def epoch_us(at: datetime) -> int:
    """An aware datetime as exact integer µs since the epoch (order-preserving)."""
    return (at - EPOCH) // _MICROSECOND



@dataclass(frozen=True, slots=True)
class RuntimePod:
    """A Runtime Pod as the scheduler needs it (SPEC §1)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    runtime: str
    """The ``runtime`` label, or "" when the pod has none."""
    phase: str
    deleting: bool
    ready: bool
    """The first ``Ready`` condition is ``True`` (missing means not ready)."""
    heartbeat_ok: bool
    """The first ``kruntimes.io/RuntimedReady`` condition has status ``True``."""
    heartbeat_at: datetime | None
    """That condition's ``lastProbeTime``; ``None`` when absent or malformed."""
    capacity: Resources

    # Derived once per pod (not part of equality or repr): what the planner's hot
    # loops read instead of re-deriving it for every pod of every cycle.
    available_probe_us: int | None = field(init=False, compare=False, repr=False)
    """The time-independent part of availability, folded with the heartbeat: the
    heartbeat's ``lastProbeTime`` in µs since the epoch when the pod is schedulable
    and its heartbeat ``True``, :data:`NEVER_US` when it can never be available,
    ``None`` when ``lastProbeTime`` is a naive datetime (no fast path)."""
    runs_capacity: Amount | None = field(init=False, compare=False, repr=False)
    """``capacity["runs"]`` (``None`` when not advertised)."""
    only_runs_capacity: int = field(init=False, compare=False, repr=False)
    """The ``runs`` capacity when it is an ``int`` and the only capacity entry > 0, else 0."""

    def __post_init__(self) -> None:
        probe: int | None = NEVER_US
        at = self.heartbeat_at
        if self.phase == RUNNING and self.ready and not self.deleting and self.heartbeat_ok and at is not None:
            probe = epoch_us(at) if at.tzinfo is not None else None
        object.__setattr__(self, "available_probe_us", probe)
        capacity = self.capacity
        runs = capacity.get(RUNS_RESOURCE)
        object.__setattr__(self, "runs_capacity", runs)
        only = 0
        if type(runs) is int and runs > 0 and all(v <= 0 for k, v in capacity.items() if k != RUNS_RESOURCE):
            only = runs
        object.__setattr__(self, "only_runs_capacity", only)

    @property
    def schedulable(self) -> bool:
        return self.phase == RUNNING and not self.deleting and self.ready

    def heartbeat_fresh(self, now: datetime, stale_after: timedelta) -> bool:
        """Fresh when ``True`` and ``now - lastProbeTime <= stale_after`` (future is fresh)."""
        if not self.heartbeat_ok or self.heartbeat_at is None:
            return False
        return now - self.heartbeat_at <= stale_after

    def available(self, now: datetime, stale_after: timedelta) -> bool:
        return self.schedulable and self.heartbeat_fresh(now, stale_after)


# --- label selectors ------------------------------------------------------------

Operator: TypeAlias = Literal["In", "NotIn", "Exists", "DoesNotExist"]
OPERATORS: Final[frozenset[str]] = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


@dataclass(frozen=True, slots=True)
class Requirement:
    """One selector requirement; ``matchLabels`` entries become ``In`` with one value."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Labels) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A compiled ``metav1.LabelSelector``: all requirements must hold (Kubernetes semantics)."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Labels) -> bool:
        for requirement in self.requirements:
            if not requirement.matches(labels):
                return False
        return True


# --- Runs ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    selector: LabelSelector
    topology_key: str = TOPOLOGY_KEY


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class RunAffinity:
    """The four term lists of ``spec.affinity`` after validation."""

    required: tuple[AffinityTerm, ...] = ()
    preferred: tuple[WeightedTerm, ...] = ()
    anti_required: tuple[AffinityTerm, ...] = ()
    anti_preferred: tuple[WeightedTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.required or self.preferred or self.anti_required or self.anti_preferred)

    def all_terms(self) -> tuple[AffinityTerm, ...]:
        return (
            self.required
            + tuple(w.term for w in self.preferred)
            + self.anti_required
            + tuple(w.term for w in self.anti_preferred)
        )


NO_AFFINITY: Final = RunAffinity()


@dataclass(frozen=True, slots=True)
class WorkspaceRef:
    name: str
    kind: str = WORKSPACE_KIND
    api_group: str = GROUP


@dataclass(frozen=True, slots=True)
class RunStatus:
    phase: str = ""
    assigned_pod: str = ""
    assigned_pod_uid: str = ""
    message: str = ""
    attempt: int = 0
    conditions: tuple[Condition, ...] = ()
    completion_time: datetime | None = None

    @property
    def pending(self) -> bool:
        """An empty phase means Pending."""
        return self.phase in ("", PENDING)

    @property
    def active(self) -> bool:
        """Consumes capacity and is an affinity target (SPEC §1)."""
        return self.phase in ACTIVE_PHASES and self.assigned_pod != ""


@dataclass(frozen=True, slots=True)
class Run:
    """A Run as the scheduler needs it.

    Validation problems of the spec do not stop decoding: they are kept here so
    that the cycle can give the Run a terminal ``Failed`` status with the reason,
    while an *active* invalid Run still counts its valid requests (SPEC §2).
    """

    namespace: str
    name: str
    uid: str
    resource_version: str
    creation_timestamp: datetime | None
    labels: Labels
    runtime: str
    requests: Resources
    """Valid entries with zeros dropped and ``runs`` defaulted to 1 (always usable as usage)."""
    requests_error: str | None
    affinity: RunAffinity
    affinity_error: str | None
    workspace: WorkspaceRef | None
    cancel_requested: bool
    retry_backoff: timedelta | None
    """``spec.retryPolicy.backoff`` when present and parseable."""
    spec_error: str | None
    """A malformed spec field other than requests and affinity (reason ``InvalidSpec``)."""
    status: RunStatus

    @property
    def key(self) -> RunKey:
        return RunKey(self.namespace, self.name)


# --- workspaces -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workspace:
    namespace: str
    name: str
    uid: str
    resource_version: str
    runtime: str
    mode: str
    phase: str
    bound_pod: str


# --- what the ledger and snapshot hold ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reservation:
    """One assumed placement: the Run's requests held on a pod until its bind is observed."""

    namespace: str
    run_uid: str
    run_name: str
    resource_version: str
    """The Run's resourceVersion the cycle planned from (the bind carries it)."""
    pod: str
    pod_uid: str
    requests: Resources
    labels: Labels


@dataclass(frozen=True, slots=True)
class Target:
    """An affinity target on a pod: an active Run, or an assumed reservation."""

    pod: str
    labels: Labels
    run_uid: str
    assumed: bool = False


@dataclass(frozen=True, slots=True)
class PodSlot:
    """A candidate pod with its usage (actual + assumed) at snapshot time."""

    pod: RuntimePod
    usage: Resources
    runs_used: Amount = field(init=False, compare=False, repr=False)
    """``usage["runs"]`` (0 when absent), derived at construction: the hot filters
    and scorers read one attribute instead of a lookup in each pod's own map."""
    load_class: LoadClass = field(init=False, compare=False, repr=False)
    """:func:`load_class_of` the pod and usage, derived at construction: the load index
    and placement without a scan read it for every reserved or moved pod."""

    def __post_init__(self) -> None:
        runs_used = self.usage.get(RUNS_RESOURCE, 0)
        object.__setattr__(self, "runs_used", runs_used)
        object.__setattr__(self, "load_class", load_class_of(self.pod, self.usage, runs_used))


LoadClass: TypeAlias = "tuple[int, Amount, bool] | tuple[tuple[tuple[str, Amount], ...], tuple[tuple[str, Amount], ...], bool]"
"""What every verdict and load key of a pod that nothing else singles out depends on:
(capacity, usage, whether the pod can be available at all). ``(runs capacity, runs
used, ok)`` for the common pod with only an integer ``runs`` capacity and runs-only
usage, else the sorted items of both (the two shapes never compare equal)."""


def load_class_of(pod: RuntimePod, usage: Resources, runs_used: Amount) -> LoadClass:
    """The load class of ``pod`` with ``usage`` (``runs_used``: its ``runs``, 0 when absent)."""
    ok = pod.available_probe_us != NEVER_US
    runs = pod.only_runs_capacity
    if runs and len(pod.capacity) == 1 and (not usage or (len(usage) == 1 and RUNS_RESOURCE in usage)):
        return (runs, runs_used, ok)
    return (tuple(sorted(pod.capacity.items())), tuple(sorted(usage.items())), ok)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs of the decision, fixed for a cycle (and logged with it)."""

    heartbeat_stale_after: timedelta = timedelta(seconds=15)
    """A heartbeat older than this makes a pod unavailable. ≤ 0 means the default (SPEC §1)."""

    def stale_after(self) -> timedelta:
        if self.heartbeat_stale_after <= timedelta(0):
            return timedelta(seconds=15)
        return self.heartbeat_stale_after


DEFAULT_CONFIG: Final = SchedulerConfig()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle may read, taken at one instant (SPEC §3.8).

    ``targets`` holds only the namespace's targets that match at least one of the
    Run's affinity terms, and of the active ones one per pod and selector (see
    ``snapshot.take``): enough to decide every term (which pods host a match,
    and whether any target in the namespace matches it), and small whatever the
    cluster's size; sorted by (pod, run uid, assumed). A plugin must not count
    targets.

    ``hosts``: for each distinct selector of the Run's terms, the pods hosting a
    target it matches — what ``targets`` says, as ``snapshot.take`` found it in
    the state's index (so a plugin need not match targets again), or ``None``
    (a snapshot read back from a cycle log or built by hand): then derived from
    ``targets`` (``plugins.affinity.selector_hosts``). Left out of equality.
    """

    key: RunKey
    run: Run | None
    pods: Sequence[PodSlot]
    """A tuple, or ``snapshot.take``'s view that gathers them on first read (equal to the tuple)."""
    targets: Sequence[Target]
    """A tuple, or ``snapshot.take``'s view that orders them on first read (equal to the tuple)."""
    workspace: Workspace | None
    reservation: Reservation | None
    """This Run's own reservation, if the ledger holds one (SPEC §3.7)."""
    now: datetime
    config: SchedulerConfig = DEFAULT_CONFIG
    hosts: Mapping[LabelSelector, frozenset[str]] | None = field(default=None, compare=False, repr=False)



Object: TypeAlias = "RuntimePod | Run | Workspace"
"""A decoded Kubernetes object the scheduler reads."""

# --- which pods host a target a selector matches (SPEC §4–§5) --------------------------


def hosting_pods(term: AffinityTerm, targets: Iterable[Target]) -> frozenset[str]:
    """The pods that host at least one target matching ``term``."""
    matches = label_matcher(term.selector)
    return frozenset(target.pod for target in targets if matches(target.labels))


def selector_hosts(snapshot: Snapshot, selector: LabelSelector) -> frozenset[str]:
    """The pods hosting a target ``selector`` matches: ``snapshot.hosts`` as
    ``snapshot.take`` found them, else derived from ``snapshot.targets``."""
    hosts = snapshot.hosts
    if hosts is not None:
        found = hosts.get(selector)
        if found is not None:
            return found
    matches = label_matcher(selector)
    return frozenset(target.pod for target in snapshot.targets if matches(target.labels))


def label_matcher(selector: LabelSelector) -> Callable[[Labels], bool]:
    """``selector.matches``, specialised for the common one-requirement ``In`` selector
    (one ``matchLabels`` entry): a single lookup instead of two calls per target."""
    requirements = selector.requirements
    if len(requirements) == 1 and requirements[0].operator == "In":
        key, values = requirements[0].key, requirements[0].values

        def matches_in(labels: Labels) -> bool:
            return labels.get(key) in values

        return matches_in
    return selector.matches
