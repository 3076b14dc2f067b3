"""The scheduling queue and its parking lot (SPEC §8), driven event by event on a simulated clock.

Cycles are played by hand: ``take`` a key as a worker would, decide it with the pure step,
and hand the result back with ``finish`` — so the races between an event and a cycle are
placed exactly where a test wants them.
"""

from __future__ import annotations

from kruntimes.kubeclient.atom import Atom
from kruntimes.effects.metrics import SchedulerMetrics
from kruntimes.effects.schedulingqueue import ECHO_WAIT, SchedulingQueue
from kruntimes.pure.ledger import EMPTY_LEDGER, Ledger, observe, release
from kruntimes.pure.model.objects import DEFAULT_CONFIG, Object, Run, RunKey
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.queueing import FIFO, NAMESPACE_FAIR, QueueOrder
from kruntimes.pure.state.cluster import ClusterState, Event, apply, from_objects
from kruntimes.pure.status import applied
from kruntimes.pure.step import KEEP, Step, decide, landing, plan, transact
from tests.builders import NOW, active_run, at, decoded_pod, decoded_run, decoded_workspace
from tests.effects.fakes import FakeClock


class Harness:
    def __init__(self, *objects: Object, policy: QueueOrder | None = None) -> None:
        self.state: Atom[ClusterState] = Atom(from_objects(objects))
        self.ledger: Atom[Ledger] = Atom(EMPTY_LEDGER)
        self.clock = FakeClock()
        self.metrics = SchedulerMetrics(DEFAULT_REGISTRY)
        self.queue = SchedulingQueue(
            self.state, self.ledger, config=DEFAULT_CONFIG, registry=DEFAULT_REGISTRY, metrics=self.metrics,
            policy=policy or FIFO, now=lambda: NOW, clock=self.clock,
        )

    def event(self, kind: str, obj: Object) -> None:
        """One watch event, as the scheduler's informer callback takes it: state, ledger hand-off, queue."""
        old = self.state.get()
        event = Event(kind, obj)  # type: ignore[arg-type]  # a test's literal
        new = apply(old, event)
        self.state.reset(new)
        released = None
        if isinstance(obj, Run):
            held = self.ledger.get().get(obj.namespace, obj.uid)
            drop = release if kind == "DELETED" else lambda ledger, ns, uid: observe(ledger, obj)
            self.ledger.reset(drop(self.ledger.get(), obj.namespace, obj.uid))
            if held is not None and self.ledger.get().get(obj.namespace, obj.uid) is None:
                released = held
        self.queue.on_event(old, new, event, released)

    def take(self) -> RunKey | None:
        key = self.queue.work.try_get()
        if key is not None:
            self.queue.started(key)
        return key

    def decide(self, key: RunKey) -> Step:
        """The step, its ledger committed (as the effect layer's swap does; writes are not applied)."""
        step = transact(self.state.get(), self.ledger.get(), key, NOW, DEFAULT_CONFIG)
        self.ledger.reset(step.ledger)
        return step

    def finish(self, key: RunKey, step: Step) -> None:
        landed, freed = landing(step, KEEP)  # writes are not applied: the ledger is the step's
        self.queue.after_cycle(key, step.settled.next, run=step.snapshot.run, landed=landed, freed=freed)
        self.queue.work.done(key)

    def cycle(self) -> tuple[RunKey, Step] | None:
        key = self.take()
        if key is None:
            return None
        step = self.decide(key)
        self.finish(key, step)
        return key, step

    def ready(self) -> list[str]:
        out: list[str] = []
        work = self.queue.work
        while (key := work.try_get()) is not None:
            out.append(key.name)
            work.done(key)
        return out


def backlog(count: int, slots: int = 1) -> Harness:
    pod = decoded_pod("a", capacity={"runs": str(slots)})
    runs = [decoded_run(f"r{i}", created=at(i)) for i in range(count)]
    return Harness(pod, *runs)


def test_a_new_leader_plans_only_what_the_free_slots_can_take() -> None:
    harness = backlog(20, slots=2)
    assert harness.queue.activate_pending() == 20
    assert harness.ready() == ["r0", "r1"]
    assert len(harness.queue.parking) == 18


def test_a_released_slot_admits_the_next_run_in_line_and_only_that_one() -> None:
    harness = backlog(5, slots=1)
    harness.queue.activate_pending()
    first = harness.cycle()
    assert first is not None and first[0].name == "r0" and first[1].write is not None
    assert harness.take() is None  # nobody else was planned for nothing
    harness.event("MODIFIED", active_run("r0", "a", resource_version="2"))  # the bind is observed...
    harness.event("MODIFIED", decoded_run("r0", phase="Succeeded", assigned_pod="a", created=at(0), resource_version="3"))
    assert harness.ready() == ["r1"]
    assert harness.metrics.value("kruntimes_scheduler_pending_run_wakeups_total", {"source": "capacity_released"}) == 1


def test_a_release_that_arrives_while_a_run_is_being_planned_is_not_lost() -> None:
    """The kube-scheduler trap: the release lands after the cycle read the state and before the
    Run is parked. The parking lot sees the event counter moved and queues the Run again."""
    pod = decoded_pod("a", capacity={"runs": "1"})
    harness = Harness(pod, active_run("holder", "a"), decoded_run("w"))
    harness.queue.activate_pending()
    assert harness.ready() == []  # the slot is taken: w is parked unplanned
    harness.queue.activate([RunKey("default", "w")])
    key = harness.take()
    assert key is not None
    step = harness.decide(key)  # plans against the full pod: Wait
    assert step.settled.outcome == "waiting"
    harness.event("MODIFIED", decoded_run("holder", phase="Succeeded", assigned_pod="a"))  # released mid-cycle
    harness.finish(key, step)
    assert RunKey("default", "w") not in harness.queue.parking
    assert harness.ready() == ["w"]


def test_without_a_mid_cycle_event_a_waiting_run_is_parked_not_requeued() -> None:
    pod = decoded_pod("a", capacity={"runs": "1"})
    harness = Harness(pod, active_run("holder", "a"), decoded_run("w"))
    harness.queue.activate([RunKey("default", "w")])
    cycled = harness.cycle()
    assert cycled is not None and cycled[1].settled.outcome == "waiting"
    assert RunKey("default", "w") in harness.queue.parking
    harness.clock.advance(29)
    assert harness.queue.sweep() == 0 and harness.ready() == []


def test_the_safety_net_re_plans_a_group_that_admitted_nobody_for_30_seconds() -> None:
    pod = decoded_pod("a", capacity={"runs": "1"})
    harness = Harness(pod, active_run("holder", "a"), decoded_run("w"))
    harness.queue.activate([RunKey("default", "w")])
    harness.cycle()
    harness.clock.advance(30)
    assert harness.queue.sweep() == 1
    assert harness.ready() == ["w"]


def test_a_group_that_is_being_served_needs_no_safety_net_for_the_runs_behind() -> None:
    harness = backlog(4, slots=1)
    harness.queue.activate_pending()
    harness.clock.advance(25)
    step = harness.cycle()  # r0 binds
    assert step is not None
    harness.event("MODIFIED", decoded_run("r0", phase="Succeeded", assigned_pod="a", created=at(0), resource_version="3"))
    assert harness.ready() == ["r1"]  # admitted now: the group made progress
    harness.clock.advance(10)  # r2 and r3 parked 35 s ago, but their group admitted 10 s ago
    assert harness.queue.sweep() == 0


def test_a_constrained_run_planned_while_no_pod_was_available_is_planned_again_when_pods_come_back() -> None:
    """A Run that waits on a Lost workspace was planned while no pod was available, so it carries
    the generic message. The pod comes back and the group's backlog is served, but admission never
    takes this Run (the workspace filter refuses it): the first refusal sends it to a cycle that
    writes its true message, and, planned against an available pod, it is not sent round again."""
    pod = decoded_pod("a", capacity={"runs": "1"}, ready=False, resource_version="1")
    runs = [decoded_run(f"r{i}", created=at(i)) for i in range(4)]
    harness = Harness(pod, decoded_workspace("ws", phase="Lost"), decoded_run("w", workspace="ws", created=at(-100)), *runs)
    harness.queue.activate_pending()  # the backlog, parked: no pod is available
    assert harness.ready() == []
    harness.queue.activate([RunKey("default", "w")])  # e.g. its workspace changed
    cycled = harness.cycle()
    assert cycled is not None and cycled[1].write is not None
    assert cycled[1].write.patch.message == 'waiting for available runtime pods for runtime "python"'
    harness.event("MODIFIED", decoded_pod("a", capacity={"runs": "1"}, resource_version="2"))  # ready again
    again = harness.cycle()
    assert again is not None and again[0].name == "w" and again[1].write is not None
    assert again[1].write.patch.message == 'waiting for workspace "ws" placement for runtime "python"'
    bound = harness.cycle()
    assert bound is not None and bound[0].name == "r0" and bound[1].settled.outcome == "scheduled"
    harness.event("MODIFIED", decoded_run("r0", phase="Succeeded", assigned_pod="a", created=at(0), resource_version="3"))
    assert harness.ready() == ["r1"]  # the workspace Run, refused again, is not planned again


def test_a_new_leaders_backlog_plans_a_run_the_room_cannot_take_once_not_never() -> None:
    """A new leader parks its backlog unplanned. A Run at the head that no pod can hold (a resource
    no pod has) is skipped by every admission, so its turn in line never comes while the group is
    served: the first pod with room that refuses it sends it to a cycle, which gives it its waiting
    status; planned once, it is parked for what could help it and not planned again."""
    pod = decoded_pod("a", capacity={"runs": "1"})
    gpu = decoded_run("gpu", requests={"gpu": "1"}, created=at(-10))
    runs = [decoded_run(f"r{i}", created=at(i)) for i in range(3)]
    harness = Harness(pod, gpu, *runs)
    harness.queue.activate_pending()  # r0 is admitted; gpu, refused, goes to its first cycle
    cycled = harness.cycle()
    assert cycled is not None and cycled[0].name == "gpu"
    assert cycled[1].write is not None and cycled[1].write.patch.message == 'waiting for available runtime pods for runtime "python"'
    bound = harness.cycle()
    assert bound is not None and bound[0].name == "r0" and bound[1].settled.outcome == "scheduled"
    harness.event("MODIFIED", decoded_run("r0", phase="Succeeded", assigned_pod="a", created=at(0), resource_version="3"))
    assert harness.ready() == ["r1"]  # the planned gpu Run is not sent round again


def test_an_admitted_run_that_does_not_use_the_room_passes_it_to_the_next() -> None:
    pod = decoded_pod("a", capacity={"runs": "1"})
    harness = Harness(pod, active_run("holder", "a"), decoded_run("r0", created=at(0)), decoded_run("r1", created=at(1)))
    harness.queue.activate_pending()
    harness.event("MODIFIED", decoded_run("holder", phase="Succeeded", assigned_pod="a"))
    key = harness.take()
    assert key is not None and key.name == "r0"
    harness.event("DELETED", decoded_run("r0", created=at(0)))  # gone before its cycle
    harness.finish(key, harness.decide(key))
    assert harness.ready() == ["r1"]  # the pod's room was not left unused


def test_a_run_no_pod_could_hold_waits_for_a_pod_that_can_not_for_releases() -> None:
    pod = decoded_pod("a", capacity={"runs": "1"})
    harness = Harness(pod, active_run("holder", "a"), decoded_run("huge", requests={"runs": "4"}, created=at(0)), decoded_run("small", created=at(1)))
    for name in ("huge", "small"):
        harness.queue.activate([RunKey("default", name)])
        harness.cycle()
    assert harness.queue.parking.counts() == {"unfit": 1, "capacity": 1}
    harness.event("MODIFIED", decoded_run("holder", phase="Succeeded", assigned_pod="a"))
    assert harness.ready() == ["small"]  # the release skipped the Run it could not help
    harness.event("ADDED", decoded_pod("b", capacity={"runs": "4"}))
    assert harness.ready() == ["huge"]


def bind_one_by_one(harness: Harness, count: int, pod: str, created: dict[str, int], runs: str = "1") -> list[str]:
    """Play cycles until ``count`` Runs have bound, each finishing as soon as its bind is seen, so
    every freed slot goes to whichever Run the queue admits next; the names in bind order."""
    bound: list[str] = []
    version = 10
    while len(bound) < count:
        cycled = harness.cycle()
        assert cycled is not None, f"nothing to plan after {bound}: {harness.queue.parking.counts()} parked"
        key, step = cycled
        if step.settled.outcome != "scheduled":
            continue
        bound.append(key.name)
        for phase in ("Running", "Succeeded"):
            version += 1
            finished = decoded_run(
                key.name, phase=phase, assigned_pod=pod, created=at(created[key.name]), requests={"runs": runs},
                resource_version=str(version),
            )
            harness.event("MODIFIED", finished)
    return bound


def test_runs_that_waited_for_pods_bind_in_line_as_slots_free_not_behind_later_runs() -> None:
    """Six Runs are planned while no Runtime Pod exists. A pod with two slots appears and takes the
    first two; a Run created later finds it full. Each freed slot then goes to the next of the six,
    in creation order, before the later Run — with no help from the safety net."""
    created = {f"r{i}": i for i in range(6)} | {"late": 100}
    harness = Harness()
    for i in range(6):
        harness.event("ADDED", decoded_run(f"r{i}", created=at(i)))
    for _ in range(6):
        cycled = harness.cycle()
        assert cycled is not None and cycled[1].settled.outcome == "waiting"
    harness.event("ADDED", decoded_pod("a", capacity={"runs": "2"}))
    harness.event("ADDED", decoded_run("late", created=at(100)))
    assert bind_one_by_one(harness, 7, "a", created) == ["r0", "r1", "r2", "r3", "r4", "r5", "late"]
    assert harness.queue.sweep() == 0 and len(harness.queue.parking) == 0


def test_runs_too_large_for_every_pod_bind_in_line_once_a_pod_grows_to_hold_them() -> None:
    """Four Runs ask for two slots of a runtime whose only pod has one. The pod grows to four: it
    takes the first two, and as they finish the other two follow in creation order, ahead of a
    later Run of the same size that found the pod full."""
    created = {f"r{i}": i for i in range(4)} | {"late": 100}
    harness = Harness(decoded_pod("a", capacity={"runs": "1"}, resource_version="1"))
    for i in range(4):
        harness.event("ADDED", decoded_run(f"r{i}", requests={"runs": "2"}, created=at(i)))
    for _ in range(4):
        cycled = harness.cycle()
        assert cycled is not None and cycled[1].settled.outcome == "waiting"
    assert harness.queue.parking.counts() == {"unfit": 4}
    harness.event("MODIFIED", decoded_pod("a", capacity={"runs": "4"}, resource_version="2"))
    harness.event("ADDED", decoded_run("late", requests={"runs": "2"}, created=at(100)))
    assert bind_one_by_one(harness, 5, "a", created, runs="2") == ["r0", "r1", "r2", "r3", "late"]
    assert harness.queue.sweep() == 0 and len(harness.queue.parking) == 0


def test_namespace_fair_admission_serves_each_namespace_in_turn() -> None:
    pods = [decoded_pod("a", namespace=ns, capacity={"runs": "1"}) for ns in ("big", "small")]
    runs = [decoded_run(f"b{i}", namespace="big", created=at(i)) for i in range(3)]
    runs += [decoded_run(f"s{i}", namespace="small", created=at(10 + i)) for i in range(2)]
    harness = Harness(*pods, *runs, policy=NAMESPACE_FAIR)
    harness.queue.activate_pending()
    assert harness.ready() == ["b0", "s0"]


def test_the_schedulers_own_wait_write_does_not_wake_the_run_again() -> None:
    pod = decoded_pod("a", capacity={"runs": "1"})
    harness = Harness(pod, active_run("holder", "a"), decoded_run("w"))
    harness.queue.activate([RunKey("default", "w")])
    cycled = harness.cycle()
    assert cycled is not None and cycled[1].write is not None
    written = applied(cycled[1].write.run, cycled[1].write.patch, "7")
    harness.event("MODIFIED", written)
    assert harness.ready() == []





def _waiting_with_its_write_unseen() -> tuple[Harness, RunKey, Run]:
    """``w`` waits behind ``holder``; its wait message landed as resourceVersion 7, which the
    informer has not shown yet (the write's response came first)."""
    pod = decoded_pod("a", capacity={"runs": "1"})
    harness = Harness(pod, active_run("holder", "a"), decoded_run("w", resource_version="5"))
    key = RunKey("default", "w")
    harness.queue.activate([key])
    cycled = harness.cycle()
    assert cycled is not None and cycled[1].write is not None
    harness.queue.wrote(key, "7")
    return harness, key, applied(cycled[1].write.run, cycled[1].write.patch, "7")


def test_a_run_is_not_planned_from_the_version_before_its_own_wait_write() -> None:
    harness, key, echo = _waiting_with_its_write_unseen()
    harness.event("MODIFIED", decoded_run("holder", phase="Succeeded", assigned_pod="a"))  # room, before the echo
    assert harness.queue.work.try_get() == key
    assert harness.queue.hold_until_seen(key)  # planned now, its bind would carry version 5: a conflict
    harness.queue.work.done(key)
    assert harness.ready() == []
    harness.event("MODIFIED", echo)
    taken = harness.take()
    assert taken == key and not harness.queue.hold_until_seen(key)
    step = harness.decide(key)
    assert step.write is not None and step.write.purpose == "bind"
    assert step.write.run.resource_version == "7"


def test_a_run_whose_write_is_never_shown_is_planned_after_the_echo_wait() -> None:
    harness, key, _ = _waiting_with_its_write_unseen()
    harness.event("MODIFIED", decoded_run("holder", phase="Succeeded", assigned_pod="a"))
    assert harness.queue.work.try_get() == key and harness.queue.hold_until_seen(key)
    harness.queue.work.done(key)
    harness.clock.advance(ECHO_WAIT)
    assert harness.queue.work.try_get() == key  # queued again by the wait itself
    assert not harness.queue.hold_until_seen(key)


def test_an_echo_shown_before_the_write_is_recorded_is_not_waited_for() -> None:
    pod = decoded_pod("a", capacity={"runs": "1"})
    harness = Harness(pod, active_run("holder", "a"), decoded_run("w", resource_version="5"))
    key = RunKey("default", "w")
    harness.queue.activate([key])
    cycled = harness.cycle()
    assert cycled is not None and cycled[1].write is not None
    harness.event("MODIFIED", applied(cycled[1].write.run, cycled[1].write.patch, "7"))  # the echo wins the race
    harness.queue.wrote(key, "7")
    harness.queue.activate([key])
    assert harness.queue.work.try_get() == key and not harness.queue.hold_until_seen(key)


def two_full_pods(*, a: int, b: int, waiting: int, freed: tuple[str, ...]) -> Harness:
    """Pods ``a`` and ``b`` with that many slots, every one taken (by ``ha<i>``, ``hb<i>``),
    ``waiting`` Runs ``r<i>`` parked behind them; then the Runs named in ``freed`` finish."""
    harness = Harness(
        decoded_pod("a", capacity={"runs": str(a)}), decoded_pod("b", capacity={"runs": str(b)}),
        *(active_run(f"ha{i}", "a") for i in range(a)), *(active_run(f"hb{i}", "b") for i in range(b)),
        *(decoded_run(f"r{i}", created=at(i)) for i in range(waiting)),
    )
    harness.queue.activate_pending()
    for name in freed:
        harness.event("MODIFIED", decoded_run(name, phase="Succeeded", assigned_pod=name[1]))
    return harness


def test_a_run_placed_on_another_pod_than_it_was_admitted_for_leaves_its_room_to_the_run_it_displaced() -> None:
    # a: 3 slots, all busy; b: 2 slots, both busy. One release on a admits r0 for a; two on b
    # admit r1 and r2 for b. r0's cycle prefers the emptier b, so one of r1 and r2 will need a's
    # room: when r0's cycle ends, a must not admit r3 into that room as well.
    harness = two_full_pods(a=3, b=2, waiting=4, freed=("ha0", "hb0", "hb1"))
    first = harness.take()
    assert first is not None and first.name == "r0"
    step = harness.decide(first)
    reserved = step.ledger.get("default", "uid-run-default-r0")
    assert step.write is not None and reserved is not None and reserved.pod == "b"
    harness.finish(first, step)
    assert harness.ready() == ["r1", "r2"], "a's free slot is r1's or r2's now, not r3's as well"
    assert harness.queue.parking.claimed("default", "a") == {"runs": 1}
    assert len(harness.queue.parking) == 1  # r3 still waits


def test_a_run_that_lost_its_reservation_to_another_worker_keeps_its_room_for_the_retry() -> None:
    # a: 2 slots, b: 3 slots, all busy. One release on each admits r0 for a and r1 for b. Two
    # workers plan them from the same ledger and both choose a, the less loaded; r0 reserves it
    # first and r1's reservation conflicts. r1 is queued again at once: b's free slot is still
    # r1's, not r2's as well (one of the two would wait and come back behind later Runs).
    harness = two_full_pods(a=2, b=3, waiting=3, freed=("ha0", "hb0"))
    first, second = harness.take(), harness.take()
    assert first is not None and second is not None and (first.name, second.name) == ("r0", "r1")
    before = harness.ledger.get()
    planned = [plan(harness.state.get(), before, key, NOW, DEFAULT_CONFIG) for key in (first, second)]
    won = decide(planned[0], harness.state.get(), harness.ledger.get())
    harness.ledger.reset(won.ledger)
    lost = decide(planned[1], harness.state.get(), harness.ledger.get())
    assert won.settled.outcome == "scheduled" and lost.settled.outcome == "reserve_conflict"
    harness.finish(first, won)
    harness.finish(second, lost)
    assert harness.queue.parking.claimed("default", "b") == {"runs": 1}
    assert RunKey("default", "r2") in harness.queue.parking and harness.ready() == [], "nobody else was admitted into r1's room"
    harness.clock.advance(1.0)  # the retry's back-off
    retry = harness.cycle()
    assert retry is not None and retry[0].name == "r1"
    reserved = retry[1].ledger.get("default", "uid-run-default-r1")
    assert reserved is not None and reserved.pod == "b"
    assert harness.queue.parking.claimed("default", "b") == {}
