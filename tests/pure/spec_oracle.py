"""An independent oracle for one planning cycle: SPEC §1, §2, §4, §5 and §7, transcribed naively.

"Active" is active *on its pod* (SPEC §1): a Run bound with an ``assignedPodUID``, or a
reservation made for a pod uid, counts (capacity, affinity target) only while a Runtime Pod
of that name with that uid is in the namespace; without a uid, the name alone decides.

Written from the rules' text, not from the code: it imports no plugin, no
framework module, not the planner, the snapshot, the ledger, the cluster state,
``resources.fits`` nor the message helpers — only the decoded model records.
It reads the whole world (every pod, Run, workspace and reservation), not a
snapshot, so the cluster state's indexes, the ledger's sync and
``snapshot.take`` are checked along with the plugins. Every quantity is an
exact ``int``/``Fraction``; selector matching is transcribed here too.

Slow and obvious on purpose: each rule is one loop over everything.

LeastLoaded with no resource to compare (no capacity > 0 with a projected usage
> 0) gets the key ``(0, 0)``, as ``least_loaded.load_key`` does (the least
loaded possible). Decoded pods always advertise ``runs`` > 0 and every Run
requests ``runs`` ≥ 1, so no decoded world reaches it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from typing import TypeAlias

from kruntimes.pure.model.objects import LabelSelector, Reservation, Run, RuntimePod, Workspace

Amount: TypeAlias = int | Fraction

FILTERS = ("RuntimePodAvailability", "RunAffinity", "WorkspacePlacement")
SCORES = ("PreferredRunAffinity", "LeastLoaded")
WEIGHTS = {"PreferredRunAffinity": 1, "LeastLoaded": 1}

UNAVAILABLE = "RuntimePodUnavailable"
AFFINITY = "UnsatisfiedRunAffinity"
ANTI_AFFINITY = "UnsatisfiedRunAntiAffinity"
WORKSPACE_UNAVAILABLE = "WorkspaceUnavailable"
WORKSPACE_PLACEMENT = "WorkspacePlacement"

ACTIVE_PHASES = ("Scheduled", "Running", "Ready")
DEFAULT_STALE_AFTER = timedelta(seconds=15)


@dataclass(frozen=True)
class OracleBind:
    pod: str
    pod_uid: str
    ranking: tuple[str, ...]
    scores: tuple[tuple[str, tuple[tuple[str, int], ...], int], ...]
    """``(pod, ((plugin, normalized score), ...), total)`` in ranking order."""
    rejections: tuple[tuple[str, str, int], ...]
    facts: frozenset[str] = frozenset()
    """What the world exercised (for the generator's statistics): see :func:`plan_by_spec`."""


@dataclass(frozen=True)
class OracleWait:
    message: str
    rejections: tuple[tuple[str, str, int], ...]
    facts: frozenset[str] = frozenset()


@dataclass(frozen=True)
class OracleFail:
    reason: str


OracleAnswer: TypeAlias = OracleBind | OracleWait | OracleFail


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Kubernetes label selector semantics: every requirement holds."""
    for requirement in selector.requirements:
        key = requirement.key
        present = key in labels
        if requirement.operator == "In":
            ok = present and labels[key] in requirement.values
        elif requirement.operator == "NotIn":
            ok = not present or labels[key] not in requirement.values
        elif requirement.operator == "Exists":
            ok = present
        elif requirement.operator == "DoesNotExist":
            ok = not present
        else:
            raise ValueError(f"unknown operator {requirement.operator!r}")
        if not ok:
            return False
    return True


def requests_of(run: Run) -> dict[str, Amount]:
    """SPEC §2: non-negative integer entries, zeros dropped, ``runs`` absent or zero → 1."""
    requests = {name: amount for name, amount in run.requests.items() if amount != 0}
    for amount in requests.values():
        if not (isinstance(amount, int) and amount >= 0):
            raise ValueError("the decoder let a bad request through")
    if requests.get("runs", 0) == 0:
        requests["runs"] = 1
    return requests


def is_active(run: Run) -> bool:
    return run.status.phase in ACTIVE_PHASES and run.status.assigned_pod != ""


def pod_is_there(namespace: str, name: str, uid: str, pods: Sequence[RuntimePod]) -> bool:
    """A Runtime Pod (any runtime) of that name with that uid is in the namespace; an empty
    ``uid`` asks for nothing (the name alone, as before uids were written)."""
    return uid == "" or any(p.namespace == namespace and p.name == name and p.uid == uid and p.runtime for p in pods)


def is_pending(run: Run) -> bool:
    return run.status.phase in ("", "Pending")


def plan_by_spec(
    run: Run,
    pods: Sequence[RuntimePod],
    runs: Sequence[Run],
    workspaces: Sequence[Workspace],
    reservations: Sequence[Reservation],
    now: datetime,
    stale_after: timedelta,
) -> OracleAnswer:
    """What the cycle for ``run`` must decide in this world.

    ``facts`` on the answer name the situations reached: "a required term is
    seedable", "equal LeastLoaded keys", "equal preferred scores", "the top total
    is tied: the name decides", "a candidate's former pod holds Runs" (an active Run
    or a reservation bound to another uid of a candidate pod's name, left out).

    Only for Runs that reach the filters or fail on their requests: a Pending,
    not cancelled Run with a runtime, a valid spec and affinity, no retry
    back-off and no reservation of its own (anything else raises ``ValueError``).
    """
    if not is_pending(run) or not run.runtime or run.cancel_requested or run.spec_error or run.affinity_error:
        raise ValueError("outside the oracle's scope: the cycle ends before filtering")
    if run.status.attempt > 1:
        raise ValueError("outside the oracle's scope: retry back-off")
    if run.requests_error is not None:
        return OracleFail("InvalidResources")
    namespace = run.namespace
    if stale_after <= timedelta(0):
        stale_after = DEFAULT_STALE_AFTER
    request = requests_of(run)

    # Reservations still unobserved (SPEC §6): the Run is in the namespace, Pending,
    # unassigned, at the reserved resourceVersion (and still under the reserved name).
    live: list[Reservation] = []
    for reservation in reservations:
        if reservation.namespace != namespace:
            continue
        if reservation.run_uid == run.uid:
            raise ValueError("outside the oracle's scope: the Run awaits its own bind")
        owner = [r for r in runs if r.namespace == namespace and r.uid == reservation.run_uid]
        if (
            len(owner) == 1
            and owner[0].name == reservation.run_name
            and owner[0].resource_version == reservation.resource_version
            and is_pending(owner[0])
            and owner[0].status.assigned_pod == ""
            and pod_is_there(namespace, reservation.pod, reservation.pod_uid, pods)
        ):
            live.append(reservation)

    active = [
        r
        for r in runs
        if r.namespace == namespace
        and is_active(r)
        and pod_is_there(namespace, r.status.assigned_pod, r.status.assigned_pod_uid, pods)
    ]
    targets: list[tuple[str, Mapping[str, str]]] = [(r.status.assigned_pod, r.labels) for r in active if r.uid != run.uid]
    targets += [(r.pod, r.labels) for r in live if r.run_uid != run.uid]

    def usage_of(pod: str) -> dict[str, Amount]:
        usage: dict[str, Amount] = {}
        for other in active:
            if other.status.assigned_pod == pod:
                for name, amount in requests_of(other).items():
                    usage[name] = usage.get(name, 0) + amount
        for reservation in live:
            if reservation.pod == pod:
                for name, amount in reservation.requests.items():
                    usage[name] = usage.get(name, 0) + amount
        return usage

    def hosts(pod: str, selector: LabelSelector) -> bool:
        return any(on == pod and selector_matches(selector, labels) for on, labels in targets)

    def any_target(selector: LabelSelector) -> bool:
        return any(selector_matches(selector, labels) for _, labels in targets)

    workspace: Workspace | None = None
    if run.workspace is not None:
        named = [w for w in workspaces if w.namespace == namespace and w.name == run.workspace.name]
        workspace = named[0] if named else None

    def availability(pod: RuntimePod) -> str | None:
        schedulable = pod.phase == "Running" and not pod.deleting and pod.ready
        fresh = pod.heartbeat_ok and pod.heartbeat_at is not None and now - pod.heartbeat_at <= stale_after
        if not (schedulable and fresh):
            return UNAVAILABLE
        usage = usage_of(pod.name)
        for name, amount in request.items():
            if amount > 0 and (name not in pod.capacity or usage.get(name, 0) + amount > pod.capacity[name]):
                return UNAVAILABLE
        return None

    facts: set[str] = set()
    for term in run.affinity.required:
        if not any_target(term.selector) and selector_matches(term.selector, run.labels):
            facts.add("a required term is seedable")

    def affinity(pod: RuntimePod) -> str | None:
        for term in run.affinity.required:
            seedable = not any_target(term.selector) and selector_matches(term.selector, run.labels)
            if not (hosts(pod.name, term.selector) or seedable):
                return AFFINITY
        for term in run.affinity.anti_required:
            if hosts(pod.name, term.selector):
                return ANTI_AFFINITY
        return None

    def placement(pod: RuntimePod) -> str | None:
        if run.workspace is None:
            return None
        if workspace is None or workspace.runtime != run.runtime or workspace.phase in ("Lost", "Released"):
            return WORKSPACE_UNAVAILABLE
        if workspace.phase == "Bound":
            if workspace.mode in ("", "RuntimePodLocal") and workspace.bound_pod != "":
                return None if pod.name == workspace.bound_pod else WORKSPACE_PLACEMENT
            if workspace.bound_pod == "":
                return WORKSPACE_UNAVAILABLE
        return None

    candidates = [p for p in pods if p.namespace == namespace and p.runtime == run.runtime]
    former = {r.status.assigned_pod for r in runs if r.namespace == namespace and is_active(r) and r not in active}
    former |= {r.pod for r in reservations if r.namespace == namespace and not pod_is_there(namespace, r.pod, r.pod_uid, pods)}
    if former & {p.name for p in candidates}:
        facts.add("a candidate's former pod holds Runs")
    counts: dict[tuple[int, str], int] = {}
    feasible: list[RuntimePod] = []
    for pod in candidates:
        for index, verdict in enumerate((availability, affinity, placement)):
            reason = verdict(pod)
            if reason is not None:
                counts[(index, reason)] = counts.get((index, reason), 0) + 1
                break
        else:
            feasible.append(pod)
    rejections = tuple((FILTERS[index], reason, count) for (index, reason), count in sorted(counts.items()))

    if not feasible:
        reasons = {reason for (_, reason) in counts}
        runtime = run.runtime
        if AFFINITY in reasons:
            message = f'waiting for available runtime pods satisfying required Run affinity for runtime "{runtime}"'
        elif ANTI_AFFINITY in reasons:
            message = f'waiting for available runtime pods satisfying required Run anti-affinity for runtime "{runtime}"'
        elif run.workspace is not None and reasons & {WORKSPACE_UNAVAILABLE, WORKSPACE_PLACEMENT}:
            message = f'waiting for workspace "{run.workspace.name}" placement for runtime "{runtime}"'
        else:
            message = f'waiting for available runtime pods for runtime "{runtime}"'
        return OracleWait(message, rejections, frozenset(facts))

    # PreferredRunAffinity
    raw: dict[str, int] = {}
    for pod in feasible:
        score = 0
        for weighted in run.affinity.preferred:
            if hosts(pod.name, weighted.term.selector):
                score += weighted.weight
        for weighted in run.affinity.anti_preferred:
            if not hosts(pod.name, weighted.term.selector):
                score += weighted.weight
        raw[pod.name] = score
    top = max(raw.values())
    preferred = {name: (value * 100 // top if top > 0 else 0) for name, value in raw.items()}

    # LeastLoaded
    keys: dict[str, tuple[Fraction, Fraction]] = {}
    for pod in feasible:
        usage = usage_of(pod.name)
        ratios = []
        for name, limit in pod.capacity.items():
            if limit <= 0:
                continue
            projected = usage.get(name, 0) + request.get(name, 0)
            if projected <= 0:
                continue
            ratios.append(Fraction(projected) / Fraction(limit))
        keys[pod.name] = (max(ratios), sum(ratios, Fraction(0))) if ratios else (Fraction(0), Fraction(0))
    n = len(feasible)
    least: dict[str, int] = {}
    if n == 1:
        least[feasible[0].name] = 100
    else:
        ordered = sorted(feasible, key=lambda p: keys[p.name])
        for pod in feasible:
            start = next(i for i, other in enumerate(ordered) if keys[other.name] == keys[pod.name])
            least[pod.name] = (n - 1 - start) * 100 // (n - 1)

    by_plugin = {p.name: (("PreferredRunAffinity", preferred[p.name]), ("LeastLoaded", least[p.name])) for p in feasible}
    totals = {name: sum(score * WEIGHTS[plugin] for plugin, score in row) for name, row in by_plugin.items()}
    ranking = tuple(sorted(totals, key=lambda name: (-totals[name], name)))
    if len(set(keys.values())) < n:
        facts.add("equal LeastLoaded keys")
    if len(set(raw.values())) < n:
        facts.add("equal preferred scores")
    if n > 1 and totals[ranking[0]] == totals[ranking[1]]:
        facts.add("the top total is tied: the name decides")
    chosen = next(p for p in feasible if p.name == ranking[0])
    return OracleBind(
        pod=chosen.name,
        pod_uid=chosen.uid,
        ranking=ranking,
        scores=tuple((name, by_plugin[name], totals[name]) for name in ranking),
        rejections=rejections,
        facts=frozenset(facts),
    )
