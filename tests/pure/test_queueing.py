"""Queue order (SPEC §8, §12: oldest first, or namespaces in turn), parking reasons and admission."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, final
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Result

from kruntimes.pure.framework.interface import ParkKind, PendingMessage, PodFilter
from kruntimes.pure.framework.registry import EMPTY_REGISTRY, must
from kruntimes.pure.ledger import EMPTY_LEDGER
from kruntimes.pure.model.objects import DEFAULT_CONFIG, EMPTY_RESOURCES, PodSlot, Run, RunKey, SchedulerConfig, Snapshot
from kruntimes.pure.model.plan import CycleError, Wait
from kruntimes.pure.placement import proven_for
from kruntimes.pure.plugins.affinity import RunAffinity
from kruntimes.pure.plugins.availability import RuntimePodAvailability
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.plugins.workspace import WorkspacePlacement
from kruntimes.pure.queueing import (
    FIFO,
    MAX_ADMISSION_WALK,
    NAMESPACE_FAIR,
    POLICIES,
    QueueEntry,
    QueueOrder,
    SortKey,
    admit,
    initial_order,
    park_reason,
    parked_blind,
)
from kruntimes.pure.state.cluster import from_objects
from kruntimes.pure.step import transact
from tests.conftest import examples
from tests.builders import NOW, active_run, affinity_json, at, decoded_pod, decoded_run, term
from tests.pure.example_plugin import DRAINING_PREFIX, REJECT_POD_DRAINING, WITH_AVOID_DRAINING, AvoidDraining
from tests.pure.ranking_world import World, worlds


def test_both_policies_order_a_lane_oldest_first_and_only_namespace_fair_has_lanes() -> None:
    young = QueueEntry(RunKey("b", "young"), datetime(2026, 1, 2, tzinfo=timezone.utc))
    old = QueueEntry(RunKey("a", "old"), datetime(2026, 1, 1, tzinfo=timezone.utc))
    undated = QueueEntry(RunKey("a", "undated"))
    for policy in (FIFO, NAMESPACE_FAIR):
        order: QueueOrder = policy
        assert [e.key.name for e in sorted((young, undated, old), key=order.sort_key)] == ["old", "young", "undated"]
    assert {FIFO.lane(young), FIFO.lane(old)} == {""}
    assert (NAMESPACE_FAIR.lane(young), NAMESPACE_FAIR.lane(old)) == ("b", "a")
    assert set(POLICIES) == {"fifo", "namespace-fair"}


def test_a_fresh_start_activates_pending_runs_oldest_first_then_by_namespace_and_name() -> None:
    runs = [
        decoded_run("b", namespace="y", created=at(-10)),
        decoded_run("a", namespace="y", created=at(-10)),
        decoded_run("z", namespace="x", created=at(-10)),
        decoded_run("oldest", namespace="z", created=at(-100)),
        decoded_run("undated", namespace="a", created=None),
        decoded_run("newest", created=at(0)),
    ]
    assert [str(k) for k in initial_order(runs)] == [
        "z/oldest",
        "x/z",
        "y/a",
        "y/b",
        "default/newest",
        "a/undated",
    ]


def test_only_pending_runs_are_activated_at_start() -> None:
    runs = [
        decoded_run("pending", phase="Pending"),
        decoded_run("empty-phase"),
        active_run("running", "a"),
        decoded_run("done", phase="Succeeded"),
    ]
    assert {k.name for k in initial_order(runs)} == {"pending", "empty-phase"}


def test_names_compare_by_byte_order() -> None:
    runs = [decoded_run(name, created=at(0)) for name in ["b", "B", "a", "é", "Z"]]
    assert [k.name for k in initial_order(runs)] == ["B", "Z", "a", "b", "é"]


@given(st.permutations(list(range(6))))
def test_initial_order_does_not_depend_on_input_order(permutation: list[int]) -> None:
    runs = [decoded_run(f"r{i}", created=at(-(i % 3)) if i != 4 else None) for i in range(6)]
    expected = initial_order(runs)
    assert initial_order([runs[i] for i in permutation]) == expected


@final
@dataclass(frozen=True, slots=True)
class _SmallestFirst:
    """A library user's policy: the smallest ``runs`` request first, equal ones by uid."""

    name: str = "smallest-first"

    def lane(self, entry: QueueEntry) -> str:
        return ""

    def sort_key(self, entry: QueueEntry) -> SortKey:
        return (int(entry.requests["runs"]), entry.uid, "")


def test_a_policy_of_ones_own_orders_by_the_uid_and_requests_the_queue_knows_of_each_run() -> None:
    runs = [
        decoded_run("a", requests={"runs": "3"}, uid="u2"),
        decoded_run("b", requests={"runs": "1"}, uid="u9"),
        decoded_run("c", requests={"runs": "1"}, uid="u1"),
    ]
    assert [k.name for k in initial_order(runs, _SmallestFirst())] == ["c", "b", "a"]


# --- admission: which parked Runs a pod with room can take --------------------------------------


def _admitted(state_objects: list[object], parked: list[str], pod: str = "a") -> list[str]:

    state = from_objects(state_objects)  # type: ignore[arg-type]  # builders' objects
    keys = [RunKey("default", name) for name in parked]
    return [k.name for k in admit(state, EMPTY_LEDGER, keys, pod, EMPTY_RESOURCES, NOW, DEFAULT_CONFIG).admitted]


def test_a_pod_with_room_for_two_admits_the_first_two_parked_runs_not_all() -> None:

    runs = [decoded_run(f"r{i}", created=at(i)) for i in range(5)]
    assert _admitted([decoded_pod("a", capacity={"runs": "2"}), *runs], [f"r{i}" for i in range(5)]) == ["r0", "r1"]


def test_a_run_the_pod_cannot_take_does_not_hold_back_the_next_one() -> None:

    picky = decoded_run("picky", affinity=affinity_json(required=[term({"app": "db"})]))  # no db anywhere, not seedable
    big = decoded_run("big", requests={"runs": "3"})
    fits = decoded_run("fits")
    pod = decoded_pod("a", capacity={"runs": "2"})
    assert _admitted([pod, picky, big, fits], ["picky", "big", "fits"]) == ["fits"]


def test_the_runs_a_pod_with_room_refuses_are_named_and_those_after_the_room_ran_out_are_not() -> None:

    picky = decoded_run("picky", affinity=affinity_json(required=[term({"app": "db"})]), created=at(0))
    big = decoded_run("big", requests={"runs": "3"}, created=at(1))
    fits = [decoded_run(f"f{i}", created=at(2 + i)) for i in range(3)]
    late = decoded_run("late", requests={"runs": "3"}, created=at(9))
    state = from_objects([decoded_pod("a", capacity={"runs": "2"}), picky, big, *fits, late])
    keys = [RunKey("default", name) for name in ("picky", "big", "f0", "f1", "f2", "late")]
    admission = admit(state, EMPTY_LEDGER, keys, "a", EMPTY_RESOURCES, NOW, DEFAULT_CONFIG)
    assert [k.name for k in admission.admitted] == ["f0", "f1"]
    assert [k.name for k in admission.refused] == ["picky", "big"]  # the walk stopped when the room was used


def test_a_parked_run_gone_bound_or_without_a_runtime_is_passed_over_and_the_walk_goes_on() -> None:
    """Parked keys go stale between the park and the event that wakes them: none of those
    may keep the pod's room from the Runs behind it."""
    bound = active_run("bound", "a")
    no_runtime = decoded_run("no-runtime", runtime="")
    pod = decoded_pod("a", capacity={"runs": "3"})
    parked = ["gone", "bound", "no-runtime", "w0", "w1"]
    assert _admitted([pod, bound, no_runtime, decoded_run("w0"), decoded_run("w1")], parked) == ["w0", "w1"]


def test_the_walk_examines_at_most_max_admission_walk_parked_runs() -> None:
    picky = [decoded_run(f"p{i:03d}", requests={"runs": "9"}) for i in range(MAX_ADMISSION_WALK)]
    parked = [r.name for r in picky] + ["fits"]
    pod = decoded_pod("a", capacity={"runs": "2"})
    assert _admitted([pod, *picky, decoded_run("fits")], parked) == []
    assert _admitted([pod, *picky[1:], decoded_run("fits")], parked[1:]) == ["fits"]


def test_a_full_pod_admits_nobody_and_the_walk_stops_at_once() -> None:

    state = [decoded_pod("a", capacity={"runs": "1"}), active_run("busy", "a"), decoded_run("w")]
    assert _admitted(state, ["w"]) == []


def test_a_pod_admits_only_runs_of_its_own_runtime_and_a_pod_gone_admits_nobody() -> None:
    """A parked key's Run may have been recreated for another runtime since it was parked."""
    objects = [decoded_pod("a", capacity={"runs": "3"}), decoded_run("w0"), decoded_run("moved", runtime="go")]
    assert _admitted(objects, ["w0", "moved"]) == ["w0"]
    assert _admitted(objects, ["moved", "w0"]) == ["w0"]  # ahead in line, it holds back nobody
    assert _admitted(objects, ["w0"], pod="gone") == []


def test_a_constrained_run_is_admitted_by_the_pod_that_meets_its_terms() -> None:
    needs_db = affinity_json(required=[term({"app": "db"})])
    objects = [
        decoded_pod("a", capacity={"runs": "3"}),
        decoded_pod("b", capacity={"runs": "3"}),
        active_run("db", "a", labels={"app": "db"}),
        decoded_run("r", affinity=needs_db),
    ]
    assert (_admitted(objects, ["r"], pod="a"), _admitted(objects, ["r"], pod="b")) == (["r"], [])


def test_admission_judges_the_heartbeat_by_the_configured_stale_after() -> None:
    """A heartbeat a minute old is fresh under a ten-minute staleAfter, stale under the 15 s default."""
    state = from_objects([decoded_pod("a", heartbeat_at=at(-60)), decoded_run("r")])
    keys = [RunKey("default", "r")]
    patient = SchedulerConfig(heartbeat_stale_after=timedelta(minutes=10))
    for config, expected in ((patient, ("r",)), (DEFAULT_CONFIG, ())):
        admission = admit(state, EMPTY_LEDGER, keys, "a", EMPTY_RESOURCES, NOW, config)
        assert tuple(k.name for k in admission.admitted) == expected


def test_park_reasons_say_what_could_help() -> None:

    cases = {
        "capacity": [decoded_pod("a", capacity={"runs": "1"}), active_run("busy", "a"), decoded_run("r")],
        "unfit": [decoded_pod("a", capacity={"runs": "1"}), decoded_run("r", requests={"runs": "2"})],
        "constraints": [decoded_pod("a"), decoded_run("r", affinity=affinity_json(required=[term({"app": "db"})]))],
    }
    for expected, objects in cases.items():
        step = transact(from_objects(objects), EMPTY_LEDGER, RunKey("default", "r"), NOW, DEFAULT_CONFIG)  # type: ignore[arg-type]
        wait = step.plan.unwrap()
        assert isinstance(wait, Wait)
        assert park_reason(step.snapshot, wait) == expected


def test_a_constrained_run_planned_while_no_pod_was_available_is_parked_blind_and_no_other() -> None:

    needs_db = affinity_json(required=[term({"app": "db"})])
    cases = {
        "constrained, no pod available": ([decoded_pod("a", ready=False)], {"affinity": needs_db}, True),
        "constrained, a stale heartbeat": ([decoded_pod("a", heartbeat_at=at(-3600))], {"workspace": "ws"}, True),
        "constrained, a pod available": ([decoded_pod("a")], {"affinity": needs_db}, False),
        "plain, no pod available": ([decoded_pod("a", ready=False)], {}, False),
    }
    for name, (pods, spec, expected) in cases.items():
        run = decoded_run("r", **spec)  # type: ignore[arg-type]  # the builder's keywords
        step = transact(from_objects([*pods, run]), EMPTY_LEDGER, RunKey("default", "r"), NOW, DEFAULT_CONFIG)
        assert isinstance(step.plan.unwrap(), Wait), name
        assert parked_blind(step.snapshot) is expected, name


class _Delegating:
    """A filter that judges Runs as the built-in one it wraps (``inner``) does."""

    inner: RuntimePodAvailability | AvoidDraining

    def prepare(self, run: Run, snapshot: Snapshot) -> Result[PodFilter | None, CycleError]:
        return self.inner.prepare(run, snapshot)

    def pending_message(self, reasons: frozenset[str], run: Run) -> PendingMessage | None:
        return self.inner.pending_message(reasons, run)

    def explain(self, reason: str, slot: PodSlot, run: Run, snapshot: Snapshot) -> str:
        return self.inner.explain(reason, slot, run, snapshot)


@dataclass(frozen=True)
class _SameAvailability(_Delegating):
    """The built-in availability filter under another type: a profile placement cannot vouch for."""

    inner: RuntimePodAvailability = RuntimePodAvailability()
    claims_fast_path: bool = False

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def reasons(self) -> frozenset[str]:
        return self.inner.reasons

    @property
    def park_kinds(self) -> Mapping[str, ParkKind]:
        return self.inner.park_kinds

    @property
    def fast_path(self) -> bool:
        return self.claims_fast_path


_UNPROVEN = must(
    must(
        must(EMPTY_REGISTRY.register_filter("RuntimePodAvailability", _SameAvailability)).register_filter(
            "RunAffinity", RunAffinity
        )
    ).register_filter("WorkspacePlacement", WorkspacePlacement)
)


def test_the_placement_fast_path_follows_what_each_plugin_of_the_profile_declares() -> None:
    claimed = _SameAvailability(claims_fast_path=True)
    vouched = must(must(_UNPROVEN.without("RuntimePodAvailability")).register_filter("RuntimePodAvailability", lambda: claimed))
    assert proven_for(vouched) and not proven_for(_UNPROVEN)
    assert not proven_for(WITH_AVOID_DRAINING)  # a plugin that does not claim it turns it off


@final
@dataclass(frozen=True, slots=True)
class _DrainingForGood(_Delegating):
    """``AvoidDraining`` declaring its reason a constraint: room on a draining pod will not help."""

    inner: AvoidDraining = AvoidDraining()
    name: ClassVar[str] = AvoidDraining.name
    reasons: ClassVar[frozenset[str]] = AvoidDraining.reasons
    park_kinds: ClassVar[Mapping[str, ParkKind]] = {REJECT_POD_DRAINING: "constraints"}
    fast_path: ClassVar[bool] = False


def test_a_run_a_new_plugin_holds_back_is_parked_by_the_kind_that_plugin_declares_for_its_reason() -> None:
    objects = [decoded_pod(f"{DRAINING_PREFIX}a"), decoded_run("r")]
    for_good = must(DEFAULT_REGISTRY.register_filter(AvoidDraining.name, _DrainingForGood))
    for registry, expected in ((WITH_AVOID_DRAINING, "capacity"), (for_good, "constraints")):
        step = transact(from_objects(objects), EMPTY_LEDGER, RunKey("default", "r"), NOW, DEFAULT_CONFIG, registry)  # type: ignore[arg-type]
        wait = step.plan.unwrap()
        assert isinstance(wait, Wait) and wait.rejections == ((AvoidDraining.name, REJECT_POD_DRAINING, 1),)
        assert park_reason(step.snapshot, wait, registry) == expected


@settings(max_examples=examples(300))
@given(worlds(cohort=False) | worlds(cohort=True), st.sampled_from([False, False, True]))
def test_an_admission_judges_each_run_as_its_own_cycle_would_on_that_pod(world: World, claim: bool) -> None:
    """A Run without required terms or a workspace is judged on the pod without cutting its
    whole snapshot; the same walk with a profile that must cut it admits and refuses the same Runs."""
    state, ledger = world.state(), world.ledger()
    assert not proven_for(_UNPROVEN) and proven_for(DEFAULT_REGISTRY)
    planned = world.run.key  # first in line: judged whenever the pod has room at all
    parked = (planned, *(key for key in initial_order(state.runs()) if key != planned))
    claimed = {"runs": 1} if claim else EMPTY_RESOURCES
    for slot in world.pods:
        args = (state, ledger, parked, slot.pod.name, claimed, world.now, world.config)
        assert admit(*args, DEFAULT_REGISTRY) == admit(*args, _UNPROVEN)
