"""Generated worlds in which the ranking decides: hypothesis strategies for planning properties.

A world is what the informers and the ledger hold — Runtime Pods, Runs,
workspaces (decoded from JSON by :mod:`tests.builders`) and reservations —
plus the Run to plan. ``World.snapshot()`` goes through ``from_objects`` (or a first list
and watch events after it: :mod:`tests.pure.large_world`) and ``step.plan`` (sync, then
``snapshot.take``) as the scheduler does, so a property over it checks the cluster state's
indexes and the ledger's sync as well as the planner.

Tuned so that most worlds reach the scores with several feasible pods:
- pods share one of a few capacity profiles (``runs``, ``cpu``, ``gpu``) and most
  are healthy; the rest are not ready, stale (also by one microsecond), exactly
  at the staleness bound, probed in the future, being deleted or not Running;
- active Runs (on candidates, on a pod of another runtime, on a pod that is gone,
  in another namespace) give usage and affinity targets; loads are small, so
  equal loads (LeastLoaded tie groups) are common; most are bound to their pod's
  uid, some by name alone (no uid) and some to a former pod of that name (the pod
  was deleted and created again: they count nowhere, SPEC §1);
- reservations of Pending Runs in the ledger, live or overtaken (Run gone, newer
  resourceVersion, already assigned), hold usage and are targets while live, and
  hold nothing when made for a former pod of the name;
- the Run requests ``runs`` and maybe ``cpu``/``gpu`` (now and then a request that
  is not a whole count: ``InvalidResources``), has required (anti-)affinity terms —
  often one its own labels match, so the cohort bootstrap is reached; sometimes an
  anti-affinity term every candidate hosts a target of — and preferred terms with few
  distinct weights (equal preferred scores);
- sometimes a workspace: Bound to a candidate or elsewhere, Pending, Lost,
  Released, for another runtime, of another mode, or missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce
from typing import TypeVar

from hypothesis import strategies as st

from kruntimes.pure.ledger import Ledger
from kruntimes.pure.model.objects import (
    DEFAULT_CONFIG,
    PodSlot,
    Reservation,
    Run,
    RuntimePod,
    SchedulerConfig,
    Snapshot,
    Workspace,
)
from kruntimes.pure.persistent.pdict import pdict
from kruntimes.pure.step import plan
from kruntimes.pure.state.cluster import ClusterState, Event, apply, from_objects
from kruntimes.pure.model.objects import Object
from tests.builders import (
    NOW,
    Json,
    affinity_json,
    at,
    decoded_pod,
    decoded_run,
    decoded_workspace,
    expression,
    term,
)
from tests.pure.spec_oracle import OracleAnswer, plan_by_spec

__all__ = ["RUNTIME", "World", "weighted", "worlds"]

T = TypeVar("T")

RUNTIME = "python"
NAMESPACE = "default"
POD_NAMES = ("pa", "pb", "pc", "pd", "pe", "Pf")
"""Short (messages never truncate); ``Pf`` sorts first by code point."""
ELSEWHERE = "nx"
"""A pod of another runtime in the namespace: its Runs are targets, it is never a candidate."""
GONE = "gone"
"""A pod name no pod has."""
POD_UIDS = ("now", "now", "now", "now", "none", "former")
"""What an active Run or a reservation is bound to: the pod's present uid, the name alone
(no ``assignedPodUID``), or a former pod of the same name (recreated since)."""


def _pod_uid(pod: str, bound_to: str, namespace: str = NAMESPACE) -> str:
    """The pod uid a Run on ``pod`` names (the builders' pod uids are derived from the name)."""
    if bound_to == "none":
        return ""
    present = f"uid-pod-{namespace}-{pod}"
    return present if bound_to == "now" else f"{present}-former"

LABELS = st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["db", "web", "gold"]), max_size=2)
TARGET_LABELS = st.one_of(
    st.sampled_from([{"app": "db"}, {"app": "web"}, {"app": "web", "tier": "gold"}, {"tier": "gold"}, {}]), LABELS
)
TERMS: tuple[Json, ...] = (
    term({"app": "db"}),
    term({"app": "web"}),
    term({"tier": "gold"}),
    term({"app": "web", "tier": "gold"}),
    term(expressions=[expression("app", "Exists")]),
    term(expressions=[expression("tier", "NotIn", ["gold"])]),
    term(expressions=[expression("app", "DoesNotExist")]),
)
COHORT = {"cohort": "c1"}
CROWD = {"crowd": "yes"}
WEIGHTS = st.sampled_from([5, 5, 10, 100])

WORKSPACE_CASES = (
    "bound",
    "bound",
    "bound-empty-mode",
    "bound-gone",
    "bound-no-pod",
    "pending",
    "lost",
    "released",
    "other-runtime",
    "other-mode",
    "missing",
)
HEALTHS = (
    "not-ready",
    "no-ready",
    "stale",
    "stale-by-1us",
    "at-bound",
    "future",
    "deleting",
    "pending-phase",
    "heartbeat-false",
    "no-probe-time",
)


@dataclass(frozen=True)
class World:
    run: Run
    objects: tuple[Object, ...]
    """Every pod, Run (the planned one included) and workspace the informers saw."""
    reservations: tuple[Reservation, ...]
    config: SchedulerConfig = DEFAULT_CONFIG
    now: datetime = NOW
    notes: frozenset[str] = field(default=frozenset(), compare=False)
    """What the generator put in (for statistics)."""
    listed: tuple[Object, ...] | None = None
    """When the informers got to ``objects`` through ``events``: what their first list held."""
    events: tuple[Event, ...] = ()
    """The watch events after that list (only with ``listed``)."""

    def state(self) -> ClusterState:
        if self.listed is None:
            return from_objects(self.objects)
        return reduce(apply, self.events, from_objects(self.listed))

    def ledger(self) -> Ledger:
        by_namespace: dict[str, dict[str, Reservation]] = {}
        for reservation in self.reservations:
            by_namespace.setdefault(reservation.namespace, {})[reservation.run_uid] = reservation
        return Ledger(pdict({ns: pdict(held) for ns, held in by_namespace.items()}))

    def snapshot(self) -> Snapshot:
        """The snapshot the scheduler's step plans from: the ledger synced, then taken."""
        return plan(self.state(), self.ledger(), self.run.key, self.now, self.config).snapshot

    @property
    def pods(self) -> tuple[PodSlot, ...]:
        """The candidate slots the cycle sees (the snapshot's)."""
        return tuple(self.snapshot().pods)

    def oracle(self) -> OracleAnswer:
        return plan_by_spec(
            self.run,
            [o for o in self.objects if isinstance(o, RuntimePod)],
            [o for o in self.objects if isinstance(o, Run)],
            [o for o in self.objects if isinstance(o, Workspace)],
            self.reservations,
            self.now,
            self.config.heartbeat_stale_after,
        )


@st.composite
def capacity_profiles(draw: st.DrawFn) -> dict[str, str]:
    annotations: dict[str, str] = {}
    runs = draw(st.sampled_from(["4", None, "3", "4", "2", "4", "1"]))
    if runs is not None:
        annotations["runs"] = runs
    cpu = draw(st.sampled_from(["4", "2", "4", "1500m", None]))
    if cpu is not None:
        annotations["cpu"] = cpu
    gpu = draw(st.sampled_from(["2", None, "1", "2", "0", "lots"]))  # "0", "lots": ignored
    if gpu is not None:
        annotations["gpu"] = gpu
    return annotations


def _pod(name: str, capacity: Mapping[str, str], health: str) -> RuntimePod:
    """A candidate pod in one health state (stale-after is 15 s unless the world says 30 s)."""
    heartbeat_at: str | None = at(-3)
    if health == "stale":
        heartbeat_at = at(-40)
    elif health == "stale-by-1us":
        heartbeat_at = at(-15.000001)
    elif health == "at-bound":
        heartbeat_at = at(-15)
    elif health == "future":
        heartbeat_at = at(120)
    elif health == "no-probe-time":
        heartbeat_at = None
    return decoded_pod(
        name,
        runtime=RUNTIME,
        capacity=capacity,
        ready={"not-ready": False, "no-ready": None}.get(health, True),
        phase="Pending" if health == "pending-phase" else "Running",
        heartbeat_at=heartbeat_at,
        heartbeat_status="False" if health == "heartbeat-false" else "True",
        deleting=health == "deleting",
    )


def _workspace(case: str, bound: str) -> Workspace | None:
    """The workspace ``ws`` in one of the cases the placement rule tells apart."""
    if case == "missing":
        return None
    if case == "bound-empty-mode":
        return decoded_workspace("ws", bound_pod=bound, mode="")
    if case == "bound-gone":
        return decoded_workspace("ws", bound_pod=GONE)
    if case == "bound-no-pod":
        return decoded_workspace("ws")
    if case == "pending":
        return decoded_workspace("ws", phase="Pending")
    if case in ("lost", "released"):
        return decoded_workspace("ws", phase=case.capitalize(), bound_pod=bound)
    if case == "other-runtime":
        return decoded_workspace("ws", runtime="node", bound_pod=bound)
    if case == "other-mode":
        return decoded_workspace("ws", mode="Shared", bound_pod=bound)
    return decoded_workspace("ws", bound_pod=bound)


def weighted(common: T, *rare: T, times: int) -> st.SearchStrategy[T]:
    """``common`` about ``times`` times as often as each of ``rare``.

    Hypothesis leans towards the first and the last element of a ``sampled_from``
    list (and shrinks towards the first), so ``common`` takes both ends.
    """
    half = times // 2
    return st.sampled_from([common] * half + list(rare) + [common] * (times - half))


def _odds(one_in: int) -> st.SearchStrategy[bool]:
    """True about once in ``one_in`` draws."""
    return weighted(False, True, times=one_in - 1)


def _requests(draw: st.DrawFn, gpu_odds: int) -> dict[str, object]:
    requests: dict[str, object] = {}
    runs = draw(st.sampled_from([None, "1", "1", "1", "0", "2"]))  # absent and "0" both mean 1
    if runs is not None:
        requests["runs"] = runs
    cpu = draw(st.sampled_from([None, None, "1", "0", "1", "2"]))
    if cpu is not None:
        requests["cpu"] = cpu
    if draw(_odds(gpu_odds)):
        requests["gpu"] = "1"
    return requests


@st.composite
def worlds(draw: st.DrawFn, cohort: bool = False) -> World:
    """A world; with ``cohort``, the Run is labelled ``cohort=c1`` and requires that label,
    which few targets carry (so the bootstrap seeds it unless one of them is live)."""
    notes: set[str] = set()
    objects: list[Object] = []
    config = draw(
        st.sampled_from(
            [DEFAULT_CONFIG] * 4
            + [SchedulerConfig(heartbeat_stale_after=timedelta(0)), SchedulerConfig(timedelta(seconds=30))]
        )
    )

    # --- Runtime Pods: a few shared capacity profiles, mostly healthy
    profiles = draw(st.lists(capacity_profiles(), min_size=1, max_size=3))
    names = draw(st.lists(st.sampled_from(POD_NAMES), min_size=3, max_size=6, unique=True))
    for name in names:
        # exactly at the staleness bound is fresh: common, so a window that excludes it shows
        health = draw(weighted("ok", *HEALTHS, *["at-bound"] * 7, times=60))
        notes.add(f"pod {health}")
        objects.append(_pod(name, draw(st.sampled_from(profiles)), health))
    objects.append(decoded_pod(ELSEWHERE, runtime="node"))
    if draw(st.booleans()):
        # the same pod name in another namespace, loaded and labelled there: must not count here
        objects.append(decoded_pod(names[0], runtime=RUNTIME, namespace="other"))
        objects.append(
            decoded_run("o1", namespace="other", labels={"app": "db"}, requests={"runs": "2"}, phase="Running", assigned_pod=names[0])
        )

    # --- active (and finished) Runs: usage and affinity targets
    hosts = st.sampled_from(list(names) * 3 + [ELSEWHERE, GONE])
    target_labels: list[tuple[str, str]] = []
    for i in range(draw(st.sampled_from([3, 4, 5, 6, 8, 2, 1, 0]))):
        phase = draw(st.sampled_from(["Running", "Running", "Scheduled", "Ready", "Succeeded", "Pending"]))
        host = draw(hosts)
        bound_to = draw(st.sampled_from(POD_UIDS))
        notes.add(f"active run bound to {bound_to} pod uid")
        objects.append(
            decoded_run(
                f"a{i}",
                runtime=draw(st.sampled_from([RUNTIME, RUNTIME, RUNTIME, "node"])),
                labels=(active_labels := draw(TARGET_LABELS)),
                requests=_requests(draw, gpu_odds=6),
                phase=phase,
                assigned_pod=host,
                assigned_pod_uid=_pod_uid(host, bound_to),
            )
        )
        target_labels.extend(sorted(active_labels.items()))
    crowded = draw(_odds(8))
    if crowded:
        # a Run on every candidate that the planned Run's anti-affinity refuses
        for name in names:
            objects.append(decoded_run(f"crowd-{name}", labels=CROWD, phase="Running", assigned_pod=name))
        notes.add("every candidate hosts a refused Run")
    if cohort and draw(_odds(3)):
        # a member of the cohort already placed (active or not), so the term may not seed
        objects.append(
            decoded_run(
                "c0",
                labels=COHORT,
                phase=draw(st.sampled_from(["Running", "Succeeded"])),
                assigned_pod=draw(hosts),
            )
        )

    # --- the ledger: reservations of other Pending Runs, live or overtaken
    reservations: list[Reservation] = []
    for i in range(draw(st.sampled_from([1, 2, 0, 3]))):
        kind = draw(st.sampled_from(["live", "live", "live", "newer-version", "gone", "assigned"]))
        notes.add(f"reservation {kind}")
        labels = COHORT if cohort and draw(_odds(4)) else draw(TARGET_LABELS)
        requests = _requests(draw, gpu_odds=8)
        pod = draw(hosts)
        made_for = draw(st.sampled_from(POD_UIDS[:-2] + POD_UIDS[-1:]))  # reserve always names a uid
        notes.add(f"reservation for {made_for} pod uid")
        pending = decoded_run(f"q{i}", labels=labels, requests=requests)
        if kind == "newer-version":
            objects.append(decoded_run(f"q{i}", labels=labels, requests=requests, resource_version="2"))
        elif kind == "assigned":
            objects.append(decoded_run(f"q{i}", labels=labels, requests=requests, phase="Scheduled", assigned_pod=pod, resource_version="2"))
        elif kind == "live":
            objects.append(pending)
        reservations.append(
            Reservation(
                namespace=NAMESPACE,
                run_uid=pending.uid,
                run_name=pending.name,
                resource_version=pending.resource_version,
                pod=pod,
                pod_uid=_pod_uid(pod, made_for),
                requests=pending.requests,
                labels=pending.labels,
            )
        )

    # --- the Run to plan
    labels = draw(LABELS)
    required: list[Json] = []
    if cohort:
        labels = {**labels, **COHORT}
        required.append(term(COHORT))
    for _ in range(draw(weighted(0, 1, 1, 1, 2, times=9))):
        kind = draw(st.sampled_from(["a target's label", "its own label", "any", "its own label", "a target's label"]))
        if kind == "its own label" and labels:
            # a term its own labels match: seedable while no target matches it (cohort bootstrap)
            key = draw(st.sampled_from(sorted(labels)))
            required.append(term({key: labels[key]}))
        elif kind == "a target's label" and target_labels:
            required.append(term(dict([draw(st.sampled_from(target_labels))])))
        else:
            required.append(draw(st.sampled_from(TERMS)))
    preferred_terms = st.lists(st.tuples(WEIGHTS, st.sampled_from(TERMS)), max_size=2)
    affinity = affinity_json(
        required=required,
        preferred=draw(preferred_terms),
        anti_required=[term(CROWD)] if crowded else [draw(st.sampled_from(TERMS))] if draw(_odds(4)) else [],
        anti_preferred=draw(preferred_terms),
    )
    requests = _requests(draw, gpu_odds=12)
    if draw(_odds(12)):
        requests["runs"] = draw(st.sampled_from(["1500m", "-1", "x"]))  # InvalidResources
        notes.add("invalid requests")
    workspace_case: str | None = draw(weighted(None, *WORKSPACE_CASES, times=20))
    run = decoded_run("r", labels=labels, requests=requests, affinity=affinity, workspace=None if workspace_case is None else "ws")
    objects.append(run)
    if workspace_case is not None:
        notes.add(f"workspace {workspace_case}")
        workspace = _workspace(workspace_case, draw(st.sampled_from(names)))
        if workspace is not None:
            objects.append(workspace)
    return World(run, tuple(objects), tuple(reservations), config, NOW, frozenset(notes))
