"""Declarative cycle scenarios (KAI style): a world in, the expected plan out (SPEC §3–§5, §7).

Each ``Scenario`` is one world — the Run, the candidate pods with their usage,
the affinity targets, the workspace, the Run's own reservation, ``now`` — and
the parts of the plan it must produce. One runner checks them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

import pytest

from kruntimes.pure.framework.registry import Registry
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.model.objects import DEFAULT_CONFIG, PodSlot, Reservation, Run, SchedulerConfig, Target, Workspace
from kruntimes.pure.model.plan import Bind, Cancel, Delay, Fail, Plan, Skip, Wait
from kruntimes.pure.readers.kube import decode_run
from tests.builders import (
    NOW,
    affinity_json,
    at,
    decoded_run,
    decoded_workspace,
    expression,
    run_json,
    term,
)
from tests.pure.planning_world import plan, rejections_map, reservation, slot, snapshot, target

PodScores = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Run | None
    pods: tuple[PodSlot, ...] = ()
    targets: tuple[Target, ...] = ()
    workspace: Workspace | None = None
    reservation: Reservation | None = None
    now: datetime = NOW
    config: SchedulerConfig = DEFAULT_CONFIG
    registry: Registry = DEFAULT_REGISTRY
    # expectations: every one that is set must hold
    plan: Plan | None = None
    pod: str | None = None
    ranking: tuple[str, ...] | None = None
    message: str | None = None
    rejections: Mapping[str, Mapping[str, int]] | None = None
    scores: PodScores | None = None
    totals: Mapping[str, int] | None = None


def run_cycle(s: Scenario) -> Plan:
    return plan(
        snapshot(s.run, s.pods, s.targets, s.workspace, s.reservation, s.now, s.config),
        s.registry,
    )


def check(s: Scenario, result: Plan) -> None:
    if s.plan is not None:
        assert result == s.plan
    if s.pod is not None:
        assert isinstance(result, Bind), result
        assert result.pod == s.pod
        assert result.pod_uid == f"uid-pod-default-{s.pod}"
    if s.ranking is not None:
        assert isinstance(result, Bind), result
        assert result.ranking == s.ranking
    if s.message is not None:
        assert isinstance(result, Wait), result
        assert result.message == s.message
        assert result.reason == "Unschedulable"
    if s.rejections is not None:
        assert isinstance(result, (Bind, Wait)), result
        assert rejections_map(result.rejections) == s.rejections
    if s.scores is not None:
        assert isinstance(result, Bind), result
        assert {p.pod: dict(p.by_plugin) for p in result.scores} == s.scores
    if s.totals is not None:
        assert isinstance(result, Bind), result
        assert {p.pod: p.total for p in result.scores} == s.totals


# --- worlds ------------------------------------------------------------------------------

RT = "python"
GENERIC = f'waiting for available runtime pods for runtime "{RT}"'
AFFINITY = f'waiting for available runtime pods satisfying required Run affinity for runtime "{RT}"'
ANTI = f'waiting for available runtime pods satisfying required Run anti-affinity for runtime "{RT}"'


def workspace_message(ws: str) -> str:
    return f'waiting for workspace "{ws}" placement for runtime "{RT}"'


def run(name: str = "r", **kwargs: object) -> Run:
    return decoded_run(name, **kwargs)  # type: ignore[arg-type]


def run_with_spec(**spec: object) -> Run:
    """A Run whose ``spec`` fields are replaced verbatim (to build malformed specs)."""
    body = run_json("r")
    cast(dict[str, object], body["spec"]).update(spec)
    return decode_run(body).unwrap()


def running_false(seconds_ago: float) -> list[dict[str, object]]:
    return [{"type": "Running", "status": "False", "reason": "Retry", "lastTransitionTime": at(-seconds_ago)}]


def requires(labels: Mapping[str, str]) -> dict[str, object]:
    return affinity_json(required=[term(labels)])


BAD_AFFINITY = {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "zone"}]}}
BAD_AFFINITY_DETAIL = (
    "invalid run affinity: runAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"
    ' must be "kruntimes.io/runtime-pod"'
)

P1 = slot("p1")
P2 = slot("p2")
P3 = slot("p3")

# --- SPEC §3 steps 2–7: precedence -------------------------------------------------------

PRECHECK = [
    Scenario("run gone is skipped as not found", None, (P1,), plan=Skip("not found")),
    Scenario("a Scheduled run is not pending", run(phase="Scheduled", assigned_pod="p1"), (P1,), plan=Skip("not pending")),
    Scenario("a Succeeded run is not pending", run(phase="Succeeded"), (P1,), plan=Skip("not pending")),
    Scenario("a Failed run with cancel is still not pending", run(phase="Failed", cancel=True), plan=Skip("not pending")),
    Scenario("an empty phase counts as Pending", run(phase=""), (P1,), pod="p1"),
    Scenario("an explicit Pending phase schedules", run(phase="Pending"), (P1,), pod="p1"),
    Scenario("an empty runtime is skipped", run(runtime=""), (P1,), plan=Skip("no runtime")),
    Scenario("an empty runtime is skipped before cancel", run(runtime="", cancel=True), plan=Skip("no runtime")),
    Scenario(
        "an empty runtime is skipped before invalid requests",
        run(runtime="", requests={"runs": "500m"}),
        plan=Skip("no runtime"),
    ),
    Scenario(
        "a malformed runtime is an invalid spec, not skipped",
        run_with_spec(runtime=5),
        (P1,),
        plan=Fail("InvalidSpec", "spec.runtime must be a string"),
    ),
    Scenario(
        "cancel wins over a malformed runtime",
        run_with_spec(runtime=5, cancelRequested=True),
        plan=Cancel("Cancelled", "cancelled by user"),
    ),
    Scenario(
        "cancel wins over invalid requests and affinity",
        run(cancel=True, requests={"runs": "abc"}, affinity=BAD_AFFINITY),
        (P1,),
        plan=Cancel("Cancelled", "cancelled by user"),
    ),
    Scenario(
        "cancel wins over a retry delay and a reservation",
        run(cancel=True, attempt=3, conditions=running_false(0)),
        reservation=reservation(run()),
        plan=Cancel(),
    ),
    Scenario(
        "an invalid spec field wins over invalid requests",
        run_with_spec(workspace={"name": "ws", "kind": "Volume"}, resources={"requests": {"runs": "-1"}}),
        plan=Fail("InvalidSpec", "spec.workspace.kind must be PersistentWorkspace"),
    ),
    Scenario(
        "invalid requests win over invalid affinity",
        run(requests={"runs": "500m", "cpu": "x"}, affinity=BAD_AFFINITY),
        (P1,),
        plan=Fail("InvalidResources", 'resource request "cpu" must be a non-negative integer'),
    ),
    Scenario(
        "invalid affinity fails with the detail",
        run(affinity=BAD_AFFINITY),
        (P1,),
        plan=Fail("InvalidAffinity", BAD_AFFINITY_DETAIL),
    ),
    Scenario(
        "invalid affinity wins over a retry delay",
        run(affinity=BAD_AFFINITY, attempt=2, conditions=running_false(0)),
        plan=Fail("InvalidAffinity", BAD_AFFINITY_DETAIL),
    ),
    Scenario(
        "a retry delay wins over awaiting bind observation",
        run(attempt=2, conditions=running_false(0)),
        (P1,),
        reservation=reservation(run()),
        plan=Delay(1.0),
    ),
    Scenario(
        "a run with a live reservation is not planned again",
        run(),
        (P1,),
        reservation=reservation(run()),
        plan=Skip("awaiting bind observation"),
    ),
    Scenario(
        "awaiting bind observation wins over having no pods",
        run(),
        reservation=reservation(run()),
        plan=Skip("awaiting bind observation"),
    ),
]

# --- SPEC §3.6: retry delay arithmetic ------------------------------------------------------

DELAY = [
    Scenario("attempt 2 waits the base", run(attempt=2, conditions=running_false(0.25)), (P1,), plan=Delay(0.75)),
    Scenario("attempt 3 waits twice the base", run(attempt=3, conditions=running_false(0.5)), (P1,), plan=Delay(1.5)),
    Scenario("attempt 4 waits four times the base", run(attempt=4, conditions=running_false(0)), plan=Delay(4.0)),
    Scenario(
        "the base comes from retryPolicy.backoff",
        run(attempt=3, backoff="10s", conditions=running_false(0)),
        plan=Delay(20.0),
    ),
    Scenario(
        "sub-second bases are exact",
        run(attempt=4, backoff="250ms", conditions=running_false(0)),
        plan=Delay(1.0),
    ),
    Scenario("the backoff is capped at 60 s", run(attempt=9, conditions=running_false(0)), plan=Delay(60.0)),
    Scenario(
        "a huge attempt is still capped at 60 s",
        run(attempt=10**9, backoff="1h", conditions=running_false(30)),
        plan=Delay(30.0),
    ),
    Scenario("a zero backoff means 1 s", run(attempt=2, backoff="0s", conditions=running_false(0)), plan=Delay(1.0)),
    Scenario("a negative backoff means 1 s", run(attempt=2, backoff="-5s", conditions=running_false(0)), plan=Delay(1.0)),
    Scenario("due exactly now schedules", run(attempt=2, conditions=running_false(1)), (P1,), pod="p1"),
    Scenario("due in the past schedules", run(attempt=3, conditions=running_false(5)), (P1,), pod="p1"),
    Scenario("attempt 1 has no delay", run(attempt=1, conditions=running_false(0)), (P1,), pod="p1"),
    Scenario(
        "a Running condition that is True has no delay",
        run(attempt=3, conditions=[{"type": "Running", "status": "True", "lastTransitionTime": at(0)}]),
        (P1,),
        pod="p1",
    ),
    Scenario("no Running condition has no delay", run(attempt=3, conditions=[]), (P1,), pod="p1"),
    Scenario(
        "the first Running condition decides",
        run(
            attempt=2,
            conditions=[
                {"type": "Running", "status": "True", "lastTransitionTime": at(0)},
                {"type": "Running", "status": "False", "lastTransitionTime": at(0)},
            ],
        ),
        (P1,),
        pod="p1",
    ),
]

# --- SPEC §4: RuntimePodAvailability ----------------------------------------------------------

UNAVAILABLE = {"RuntimePodAvailability": {"RuntimePodUnavailable": 1}}

AVAILABILITY = [
    Scenario("a healthy pod with room is chosen", run(), (slot("p1"),), pod="p1", rejections={}),
    Scenario("a pod not Running is unavailable", run(), (slot("p1", phase="Pending"),), message=GENERIC, rejections=UNAVAILABLE),
    Scenario("a deleting pod is unavailable", run(), (slot("p1", deleting=True),), message=GENERIC, rejections=UNAVAILABLE),
    Scenario("a pod not Ready is unavailable", run(), (slot("p1", ready=False),), message=GENERIC, rejections=UNAVAILABLE),
    Scenario("a pod without Ready is unavailable", run(), (slot("p1", ready=None),), message=GENERIC, rejections=UNAVAILABLE),
    Scenario(
        "a heartbeat that is not True is unavailable",
        run(),
        (slot("p1", heartbeat_status="False"),),
        message=GENERIC,
        rejections=UNAVAILABLE,
    ),
    Scenario(
        "a pod without heartbeat is unavailable",
        run(),
        (slot("p1", heartbeat_status=None),),
        message=GENERIC,
        rejections=UNAVAILABLE,
    ),
    Scenario(
        "a heartbeat without probe time is unavailable",
        run(),
        (slot("p1", heartbeat_at=None),),
        message=GENERIC,
        rejections=UNAVAILABLE,
    ),
    Scenario("a heartbeat 15 s old is fresh", run(), (slot("p1", heartbeat_at=at(-15)),), pod="p1"),
    Scenario(
        "a heartbeat 15.000001 s old is stale",
        run(),
        (slot("p1", heartbeat_at=at(-15.000001)),),
        message=GENERIC,
        rejections=UNAVAILABLE,
    ),
    Scenario("a heartbeat in the future is fresh", run(), (slot("p1", heartbeat_at=at(3600)),), pod="p1"),
    Scenario(
        "staleAfter comes from the config",
        run(),
        (slot("p1", heartbeat_at=at(-20)),),
        config=SchedulerConfig(heartbeat_stale_after=timedelta(seconds=30)),
        pod="p1",
    ),
    Scenario(
        "a non-positive staleAfter means 15 s",
        run(),
        (slot("p1", heartbeat_at=at(-16)), slot("p2", heartbeat_at=at(-15))),
        config=SchedulerConfig(heartbeat_stale_after=timedelta(0)),
        pod="p2",
        rejections=UNAVAILABLE,
    ),
    Scenario("usage + request equal to capacity fits", run(), (slot("p1", usage={"runs": 1}),), pod="p1"),
    Scenario("a full pod is unavailable", run(), (slot("p1", usage={"runs": 2}),), message=GENERIC, rejections=UNAVAILABLE),
    Scenario(
        "every requested resource must fit",
        run(requests={"runs": "1", "gpu": "2"}),
        (slot("p1", {"gpu": "1"}), slot("p2", {"gpu": "3"}, {"gpu": 2}), slot("p3", {"gpu": "4"}, {"gpu": 2})),
        pod="p3",
        rejections={"RuntimePodAvailability": {"RuntimePodUnavailable": 2}},
    ),
    Scenario(
        "a resource the pod does not advertise never fits",
        run(requests={"gpu": "1"}),
        (slot("p1"),),
        message=GENERIC,
        rejections=UNAVAILABLE,
    ),
    Scenario("a zero request asks for nothing", run(requests={"gpu": "0"}), (slot("p1"),), pod="p1"),
    Scenario(
        "capacity annotations override the default runs",
        run(requests={"runs": "3"}),
        (slot("p1"), slot("p2", {"runs": "3"})),
        pod="p2",
    ),
    Scenario("no candidate pods: generic wait, no rejections", run(), (), message=GENERIC, rejections={}),
]

# --- SPEC §4: RunAffinity -------------------------------------------------------------------------

AFFINITY_REJECTED = {"RunAffinity": {"UnsatisfiedRunAffinity": 2}}

RUN_AFFINITY = [
    Scenario(
        "required affinity picks the pod hosting a matching target",
        run(affinity=requires({"app": "db"})),
        (P1, P2, P3),
        (target("p2", {"app": "db"}), target("p3", {"app": "web"})),
        pod="p2",
        ranking=("p2",),
        rejections=AFFINITY_REJECTED,
    ),
    Scenario(
        "an assumed target counts like an active one",
        run(affinity=requires({"app": "db"})),
        (P1, P2),
        (target("p1", {"app": "db"}, assumed=True),),
        pod="p1",
    ),
    Scenario(
        "no matching target and own labels match: the term is seedable anywhere",
        run(labels={"app": "db"}, affinity=requires({"app": "db"})),
        (P1, P2),
        (target("p2", {"app": "web"}),),
        ranking=("p1", "p2"),
        rejections={},
    ),
    Scenario(
        "no matching target and own labels do not match: wait",
        run(labels={"app": "web"}, affinity=requires({"app": "db"})),
        (P1, P2),
        message=AFFINITY,
        rejections=AFFINITY_REJECTED,
    ),
    Scenario(
        "mutual requirements never seed: A requires B's labels",
        run("a", labels={"team": "a"}, affinity=requires({"team": "b"})),
        (P1, P2),
        message=AFFINITY,
        rejections=AFFINITY_REJECTED,
    ),
    Scenario(
        "mutual requirements never seed: B requires A's labels",
        run("b", labels={"team": "b"}, affinity=requires({"team": "a"})),
        (P1, P2),
        message=AFFINITY,
        rejections=AFFINITY_REJECTED,
    ),
    Scenario(
        "a matching target elsewhere in the namespace stops seeding",
        run(labels={"app": "db"}, affinity=requires({"app": "db"})),
        (P1, P2),
        (target("p-other-runtime", {"app": "db"}),),
        message=AFFINITY,
        rejections=AFFINITY_REJECTED,
    ),
    Scenario(
        "a full pod hosting the target: availability rejects first, affinity the rest",
        run(affinity=requires({"app": "db"})),
        (slot("p1", usage={"runs": 2}), P2),
        (target("p1", {"app": "db"}),),
        message=AFFINITY,
        rejections={"RuntimePodAvailability": {"RuntimePodUnavailable": 1}, "RunAffinity": {"UnsatisfiedRunAffinity": 1}},
    ),
    Scenario(
        "all required terms must hold on the same pod",
        run(affinity=affinity_json(required=[term({"app": "db"}), term({"tier": "gold"})])),
        (P1, P2, P3),
        (target("p1", {"app": "db"}), target("p2", {"app": "db"}), target("p2", {"tier": "gold"}), target("p3", {"tier": "gold"})),
        ranking=("p2",),
    ),
    Scenario(
        "a seedable term and a matched term: the matched one decides",
        run(labels={"cohort": "x"}, affinity=affinity_json(required=[term({"cohort": "x"}), term({"app": "db"})])),
        (P1, P2),
        (target("p2", {"app": "db"}),),
        ranking=("p2",),
    ),
    Scenario(
        "selector expressions follow Kubernetes semantics",
        run(
            affinity=affinity_json(
                required=[
                    term(
                        expressions=[
                            expression("app", "In", ["db", "cache"]),
                            expression("env", "NotIn", ["prod"]),
                            expression("tier", "Exists"),
                            expression("legacy", "DoesNotExist"),
                        ]
                    )
                ]
            )
        ),
        (P1, P2, P3, slot("p4"), slot("p5")),
        (
            target("p1", {"app": "db", "tier": "1"}),
            target("p2", {"app": "cache", "tier": "1", "env": "prod"}),
            target("p3", {"app": "cache", "tier": "2", "env": "dev"}),
            target("p4", {"app": "db"}),
            target("p5", {"app": "db", "tier": "1", "legacy": ""}),
        ),
        ranking=("p1", "p3"),
    ),
    Scenario(
        "required anti-affinity rejects pods hosting a matching target",
        run(affinity=affinity_json(anti_required=[term({"app": "db"})])),
        (P1, P2, P3),
        (target("p1", {"app": "db"}), target("p3", {"app": "db"}, assumed=True)),
        ranking=("p2",),
        rejections={"RunAffinity": {"UnsatisfiedRunAntiAffinity": 2}},
    ),
    Scenario(
        "anti-affinity has no bootstrap: own labels matching does not matter",
        run(labels={"app": "db"}, affinity=affinity_json(anti_required=[term({"app": "db"})])),
        (P1, P2),
        ranking=("p1", "p2"),
    ),
    Scenario(
        "anti-affinity everywhere waits with the anti-affinity message",
        run(affinity=affinity_json(anti_required=[term({"app": "db"})])),
        (P1, P2),
        (target("p1", {"app": "db"}), target("p2", {"app": "db"})),
        message=ANTI,
        rejections={"RunAffinity": {"UnsatisfiedRunAntiAffinity": 2}},
    ),
    Scenario(
        "affinity is checked before anti-affinity on the same pod",
        run(affinity=affinity_json(required=[term({"app": "db"})], anti_required=[term({"app": "web"})])),
        (P1, P2),
        (target("p1", {"app": "db"}), target("p1", {"app": "web"})),
        message=AFFINITY,
        rejections={"RunAffinity": {"UnsatisfiedRunAffinity": 1, "UnsatisfiedRunAntiAffinity": 1}},
    ),
]

# --- SPEC §4: WorkspacePlacement -------------------------------------------------------------------


def ws(**kwargs: object) -> Workspace:
    return decoded_workspace("ws", **kwargs)  # type: ignore[arg-type]


WS_RUN = run(workspace="ws")
ALL_UNAVAILABLE = {"WorkspacePlacement": {"WorkspaceUnavailable": 3}}

WORKSPACE = [
    Scenario("no workspace: no constraint", run(), (P1, P2, P3), ranking=("p1", "p2", "p3")),
    Scenario("a missing workspace rejects every pod", WS_RUN, (P1, P2, P3), message=workspace_message("ws"), rejections=ALL_UNAVAILABLE),
    Scenario(
        "a workspace of another name is missing",
        WS_RUN,
        (P1, P2, P3),
        workspace=decoded_workspace("other", bound_pod="p1"),
        message=workspace_message("ws"),
        rejections=ALL_UNAVAILABLE,
    ),
    Scenario(
        "a workspace for another runtime is unavailable even when bound",
        WS_RUN,
        (P1, P2, P3),
        workspace=ws(runtime="java", bound_pod="p1"),
        message=workspace_message("ws"),
        rejections=ALL_UNAVAILABLE,
    ),
    Scenario(
        "a workspace for another runtime is unavailable even when Pending",
        WS_RUN,
        (P1, P2, P3),
        workspace=ws(runtime="java", phase="Pending"),
        message=workspace_message("ws"),
        rejections=ALL_UNAVAILABLE,
    ),
    Scenario(
        "a Lost workspace is unavailable",
        WS_RUN,
        (P1, P2, P3),
        workspace=ws(phase="Lost", bound_pod="p1"),
        message=workspace_message("ws"),
        rejections=ALL_UNAVAILABLE,
    ),
    Scenario(
        "a Released workspace is unavailable",
        WS_RUN,
        (P1, P2, P3),
        workspace=ws(phase="Released", bound_pod="p1"),
        message=workspace_message("ws"),
        rejections=ALL_UNAVAILABLE,
    ),
    Scenario(
        "a Bound RuntimePodLocal workspace admits only its pod",
        WS_RUN,
        (P1, P2, P3),
        workspace=ws(bound_pod="p2"),
        ranking=("p2",),
        rejections={"WorkspacePlacement": {"WorkspacePlacement": 2}},
    ),
    Scenario(
        "an empty mode means RuntimePodLocal",
        WS_RUN,
        (P1, P2, P3),
        workspace=ws(mode="", bound_pod="p3"),
        ranking=("p3",),
    ),
    Scenario(
        "a bound pod that is unavailable leaves the run waiting for the workspace",
        WS_RUN,
        (slot("p1", usage={"runs": 2}), P2),
        workspace=ws(bound_pod="p1"),
        message=workspace_message("ws"),
        rejections={
            "RuntimePodAvailability": {"RuntimePodUnavailable": 1},
            "WorkspacePlacement": {"WorkspacePlacement": 1},
        },
    ),
    Scenario(
        "Bound with an empty boundPod is unavailable",
        WS_RUN,
        (P1, P2, P3),
        workspace=ws(bound_pod=""),
        message=workspace_message("ws"),
        rejections=ALL_UNAVAILABLE,
    ),
    Scenario("a Pending workspace: no constraint", WS_RUN, (P1, P2), workspace=ws(phase="Pending"), ranking=("p1", "p2")),
    Scenario(
        "a Bound workspace of another mode: no constraint",
        WS_RUN,
        (P1, P2),
        workspace=ws(mode="Shared", bound_pod="p2"),
        ranking=("p1", "p2"),
    ),
    Scenario(
        "an unknown phase: no constraint",
        WS_RUN,
        (P1, P2),
        workspace=ws(phase="Resizing", bound_pod="p2"),
        ranking=("p1", "p2"),
    ),
]

# --- SPEC §7: wait message precedence ---------------------------------------------------------------

WS_AFFINITY_RUN = run(workspace="ws", affinity=affinity_json(required=[term({"app": "db"})], anti_required=[term({"app": "web"})]))

WAIT_MESSAGES = [
    Scenario(
        "affinity beats anti-affinity and workspace",
        WS_AFFINITY_RUN,
        (P1, P2, P3),
        (target("p2", {"app": "db"}), target("p2", {"app": "web"}), target("p3", {"app": "db"})),
        workspace=ws(bound_pod="p1"),
        message=AFFINITY,
        rejections={
            "RunAffinity": {"UnsatisfiedRunAffinity": 1, "UnsatisfiedRunAntiAffinity": 1},
            "WorkspacePlacement": {"WorkspacePlacement": 1},
        },
    ),
    Scenario(
        "anti-affinity beats workspace",
        WS_AFFINITY_RUN,
        (P2, P3),
        (target("p2", {"app": "db"}), target("p2", {"app": "web"}), target("p3", {"app": "db"})),
        workspace=ws(bound_pod="p1"),
        message=ANTI,
    ),
    Scenario(
        "workspace beats availability",
        run(workspace="ws"),
        (slot("p1", ready=False), P2),
        workspace=ws(bound_pod="p1"),
        message=workspace_message("ws"),
    ),
    Scenario(
        "availability alone gives the generic message",
        run(affinity=requires({"app": "db"})),
        (slot("p1", ready=False),),
        (target("p1", {"app": "db"}),),
        message=GENERIC,
    ),
]

# --- SPEC §5: scores, weights, ranking ---------------------------------------------------------------

ZONE_BLUE = term({"zone": "blue"})
TIER_GOLD = term({"tier": "gold"})

SCORING = [
    Scenario(
        "the worked example of SPEC §5 picks c",
        run(affinity=affinity_json(preferred=[(1, ZONE_BLUE), (1, TIER_GOLD)])),
        (
            slot("a", {"runs": "2"}, {"runs": 1}),
            slot("b", {"runs": "4"}, {"runs": 2}),
            slot("c", {"runs": "4"}, {"runs": 1}),
        ),
        (
            target("a", {"zone": "blue", "tier": "gold"}),
            target("b", {}, uid="b1"),
            target("b", {}, uid="b2"),
            target("c", {"zone": "blue"}),
        ),
        pod="c",
        ranking=("c", "a", "b"),
        scores={
            "a": {"PreferredRunAffinity": 100, "LeastLoaded": 0},
            "b": {"PreferredRunAffinity": 0, "LeastLoaded": 50},
            "c": {"PreferredRunAffinity": 50, "LeastLoaded": 100},
        },
        totals={"a": 100, "b": 50, "c": 150},
    ),
    Scenario(
        "weights multiply: PreferredRunAffinity × 3 turns the worked example to a",
        run(affinity=affinity_json(preferred=[(1, ZONE_BLUE), (1, TIER_GOLD)])),
        (
            slot("a", {"runs": "2"}, {"runs": 1}),
            slot("b", {"runs": "4"}, {"runs": 2}),
            slot("c", {"runs": "4"}, {"runs": 1}),
        ),
        (target("a", {"zone": "blue", "tier": "gold"}), target("c", {"zone": "blue"})),
        registry=DEFAULT_REGISTRY.with_weight("PreferredRunAffinity", 3).unwrap(),
        pod="a",
        totals={"a": 300, "b": 50, "c": 250},
    ),
    Scenario(
        "preferred anti-affinity rewards pods without a matching target",
        run(affinity=affinity_json(anti_preferred=[(10, term({"app": "noisy"}))])),
        (P1, P2, P3),
        (target("p1", {"app": "noisy"}), target("p3", {"app": "noisy"})),
        scores={
            "p1": {"PreferredRunAffinity": 0, "LeastLoaded": 100},
            "p2": {"PreferredRunAffinity": 100, "LeastLoaded": 100},
            "p3": {"PreferredRunAffinity": 0, "LeastLoaded": 100},
        },
        pod="p2",
    ),
    Scenario(
        "preferred weights sum and normalize to the maximum",
        run(
            affinity=affinity_json(
                preferred=[(30, term({"a": "1"})), (60, term({"b": "1"}))],
                anti_preferred=[(10, term({"c": "1"}))],
            )
        ),
        (P1, P2, P3, slot("p4")),
        (target("p1", {"a": "1", "b": "1"}), target("p2", {"b": "1", "c": "1"}), target("p3", {"c": "1"})),
        # raw: p1 = 30+60+10 = 100, p2 = 60, p3 = 0, p4 = 10
        scores={
            "p1": {"PreferredRunAffinity": 100, "LeastLoaded": 100},
            "p2": {"PreferredRunAffinity": 60, "LeastLoaded": 100},
            "p3": {"PreferredRunAffinity": 0, "LeastLoaded": 100},
            "p4": {"PreferredRunAffinity": 10, "LeastLoaded": 100},
        },
        ranking=("p1", "p2", "p4", "p3"),
    ),
    Scenario(
        "normalization floors: raw 1 of 3 scores 33",
        run(affinity=affinity_json(preferred=[(1, term({"a": "1"})), (2, term({"b": "1"}))])),
        (P1, P2),
        (target("p1", {"a": "1", "b": "1"}), target("p2", {"a": "1"})),
        scores={
            "p1": {"PreferredRunAffinity": 100, "LeastLoaded": 100},
            "p2": {"PreferredRunAffinity": 33, "LeastLoaded": 100},
        },
    ),
    Scenario(
        "LeastLoaded: n=3 distinct scores 100, 50, 0",
        run(),
        (slot("x", {"runs": "4"}, {"runs": 2}), slot("y", {"runs": "4"}), slot("z", {"runs": "4"}, {"runs": 1})),
        ranking=("y", "z", "x"),
        totals={"y": 100, "z": 50, "x": 0},
    ),
    Scenario(
        "LeastLoaded: [x, x, y] scores 100, 100, 0",
        run(),
        (slot("p1", {"runs": "4"}), slot("p2", {"runs": "8"}, {"runs": 1}), slot("p3", {"runs": "4"}, {"runs": 1})),
        # keys: p1 = 1/4, p2 = 2/8 = 1/4 (the same rational), p3 = 2/4
        totals={"p1": 100, "p2": 100, "p3": 0},
        ranking=("p1", "p2", "p3"),
    ),
    Scenario(
        "LeastLoaded: [x, y, y] scores 100, 50, 50",
        run(),
        (slot("p1", {"runs": "4"}), slot("p2", {"runs": "4"}, {"runs": 1}), slot("p3", {"runs": "4"}, {"runs": 1})),
        totals={"p1": 100, "p2": 50, "p3": 50},
    ),
    Scenario(
        "LeastLoaded: n=4 scores 100, 66, 33, 0",
        run(),
        (
            slot("p1", {"runs": "5"}),
            slot("p2", {"runs": "5"}, {"runs": 1}),
            slot("p3", {"runs": "5"}, {"runs": 2}),
            slot("p4", {"runs": "5"}, {"runs": 3}),
        ),
        totals={"p1": 100, "p2": 66, "p3": 33, "p4": 0},
    ),
    Scenario("LeastLoaded: one candidate scores 100", run(), (slot("p1", usage={"runs": 1}),), totals={"p1": 100}),
    Scenario(
        "LeastLoaded compares the dominant ratio first, then the sum",
        run(requests={"runs": "1", "cpu": "1"}),
        (
            slot("p1", {"runs": "2", "cpu": "4"}),  # (1/2, 1/2 + 1/4)
            slot("p2", {"runs": "2", "cpu": "2"}),  # (1/2, 1/2 + 1/2)
            slot("p3", {"runs": "4", "cpu": "4"}, {"cpu": 2}),  # (3/4, 1/4 + 3/4)
        ),
        ranking=("p1", "p2", "p3"),
        totals={"p1": 100, "p2": 50, "p3": 0},
    ),
    Scenario(
        "LeastLoaded counts advertised resources the run does not request",
        run(),
        (slot("p1", {"runs": "4", "mem": "8"}, {"mem": 6}), slot("p2", {"runs": "4", "mem": "8"}, {"mem": 1})),
        ranking=("p2", "p1"),
    ),
    Scenario(
        "LeastLoaded ratios are exact with fractional capacities",
        run(requests={"runs": "1", "cpu": "1"}),
        (
            slot("p1", {"runs": "10", "cpu": "1500m"}),  # cpu 1 / 1.5 = 2/3
            slot("p2", {"runs": "10", "cpu": "3"}, {"cpu": 1}),  # cpu 2 / 3 = 2/3
            slot("p3", {"runs": "10", "cpu": "2"}),  # cpu 1/2
        ),
        ranking=("p3", "p1", "p2"),
        totals={"p3": 100, "p1": 50, "p2": 50},
    ),
    Scenario(
        "equal totals rank by pod name in byte order",
        run(),
        (slot("b"), slot("aa"), slot("a"), slot("B"), slot("é")),
        ranking=("B", "a", "aa", "b", "é"),
        pod="B",
    ),
]

SCENARIOS = PRECHECK + DELAY + AVAILABILITY + RUN_AFFINITY + WORKSPACE + WAIT_MESSAGES + SCORING


@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.name) for s in SCENARIOS])
def test_scenario(scenario: Scenario) -> None:
    check(scenario, run_cycle(scenario))


def test_scenario_names_are_unique() -> None:
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names))


def test_bind_scores_are_in_ranking_order_with_plugins_in_registration_order() -> None:
    result = run_cycle(SCORING[0])
    assert isinstance(result, Bind)
    assert tuple(s.pod for s in result.scores) == result.ranking
    assert all(tuple(name for name, _ in s.by_plugin) == ("PreferredRunAffinity", "LeastLoaded") for s in result.scores)


def test_rejections_are_ordered_by_plugin_registration_then_reason() -> None:
    result = run_cycle(WAIT_MESSAGES[0])
    assert isinstance(result, Wait)
    assert result.rejections == (
        ("RunAffinity", "UnsatisfiedRunAffinity", 1),
        ("RunAffinity", "UnsatisfiedRunAntiAffinity", 1),
        ("WorkspacePlacement", "WorkspacePlacement", 1),
    )


def test_wait_messages_never_name_pods_runs_or_selectors() -> None:
    for s in SCENARIOS:
        result = run_cycle(s)
        if isinstance(result, Wait):
            for secret in ("p1", "p2", "p3", "db", "web", "team", "app", s.run.name if s.run else "r"):
                assert f'"{secret}"' not in result.message and f" {secret} " not in result.message
