"""The invariant checker catches each violation it exists for (hand-made histories), and passes clean ones.

Without these, a green chaos test would only show the checker is blind.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kruntimes.pure.model import messages
from kruntimes.verify import CheckOptions, Report, check_history, records_from_json

from .harness import diagnose, in_flight_at_pause
from .histories import EVENTS, LEASES, PODS, RUNS, SCHED, History

WAIT = messages.waiting_for_pods("python")


def check(h: History, **options: object) -> Report:
    return check_history(h.records, CheckOptions(**options))  # type: ignore[arg-type]


def only(report: Report, invariant: str) -> None:
    counts = report.counts()
    assert counts[invariant] >= 1, report.summary()
    assert all(n == 0 for name, n in counts.items() if name != invariant), report.summary()


def test_a_clean_history_passes() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "2"})
    for name in ("a", "b", "c"):
        h.run(name)
    h.bind("a", "p0")
    h.bind("b", "p0")
    h.wait("c", WAIT)
    h.event()
    report = check(h)
    assert report.ok, report.summary()
    assert report.binds == 2 and report.checked["capacity"] == 2 and report.checked["final_state"] == 1  # only c is still Pending
    assert report.writers == {SCHED: 4}


def test_capacity_overcommit_is_caught() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "2"})
    for name in ("a", "b", "c"):
        h.run(name)
        h.bind(name, "p0")
    report = check(h, check_final=False)
    only(report, "capacity")
    (v,) = report.violations
    assert (v.run, v.pod, v.resource_version) == ("default/c", "p0", h.rv)
    assert "usage 3 > capacity 2" in v.detail


def test_the_chaos_diagnosis_shows_the_writes_behind_a_violation() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "2"})
    for name in ("a", "b", "c"):
        h.run(name)
        h.bind(name, "p0")
    report = check(h, check_final=False)
    text = diagnose(list(h.records), report)
    assert str(report.violations[0]) in text
    lines = text.splitlines()
    assert any("pod ADDED" in line and "'kruntimes.io/capacity.runs': '2'" in line for line in lines), text
    for name in ("a", "b", "c"):
        assert any(f"run {name} " in line and "phase=Scheduled pod=p0" in line for line in lines), text


def test_capacity_counts_requests_and_default_runs() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "4", "gpu": "2"})
    h.run("a", requests={"gpu": "1"})
    h.run("b", requests={"gpu": "2"})
    h.bind("a", "p0")
    h.bind("b", "p0")
    assert check(h, check_final=False).count("capacity") == 1
    h2 = History()
    h2.pod("p0")  # default runs: 2
    h2.run("a", requests={"runs": "2"})
    h2.run("b")
    h2.bind("a", "p0")
    h2.bind("b", "p0")
    assert check(h2, check_final=False).count("capacity") == 1


def test_capacity_uses_the_pod_as_it_stood_at_the_bind() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "1"})
    h.run("a")
    h.run("b")
    h.bind("a", "p0")
    h.set_capacity("p0", {"runs": "2"})
    h.bind("b", "p0")  # fits the new capacity
    assert check(h, check_final=False).ok
    h.set_capacity("p0", {"runs": "1"})  # lowering capacity later is not the scheduler's overcommit
    assert check(h, check_final=False).ok


def test_finished_runs_free_capacity() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "1"})
    h.run("a")
    h.run("b")
    h.bind("a", "p0")
    h.finish("a")
    h.bind("b", "p0")
    assert check(h).ok


def test_runs_bound_to_a_pod_deleted_and_created_again_under_its_name_count_nothing_on_the_new_one() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "2"}, uid="first")
    for name in ("a", "b", "c", "d"):
        h.run(name)
    h.bind("a", "p0", pod_uid="first")
    h.bind("b", "p0", pod_uid="first")
    h.delete_pod("p0")
    h.pod("p0", capacity={"runs": "2"}, uid="second")
    h.bind("c", "p0", pod_uid="second")
    h.bind("d", "p0", pod_uid="second")
    report = check(h, check_final=False)
    assert report.ok, report.summary()
    assert report.checked["capacity"] == 4
    h.run("e")
    h.bind("e", "p0", pod_uid="second")  # the new pod itself is full: that is still an overcommit
    only(check(h, check_final=False), "capacity")


def test_a_bind_to_a_missing_or_foreign_pod_is_caught() -> None:
    h = History()
    h.pod("p0")
    h.pod("j0", runtime="java")
    h.run("a")
    h.run("b")
    h.run("c")
    h.bind("a", "nope")
    h.bind("b", "j0")
    h.bind("c", "p0", pod_uid="stale-uid")
    report = check(h, check_final=False)
    only(report, "capacity")
    details = [v.detail for v in report.violations]
    assert details == [
        "bound to a pod that does not exist",
        "bound to a pod of another runtime",
        "bound to a pod UID that is not the pod's current UID",
    ]


def test_a_pod_change_within_the_race_window_excuses_the_bind() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "2"})
    h.run("a")
    h.run("b")
    h.bind("a", "p0")
    h.set_capacity("p0", {"runs": "1"})  # while b's bind was in flight
    h.bind("b", "p0")
    strict = check(h, check_final=False)
    assert strict.count("capacity") == 1
    lenient = check(h, check_final=False, race_window=1.0)
    assert lenient.ok and lenient.raced_binds == 1
    h.advance(5.0)
    h.run("c")
    h.bind("c", "p0")  # long after: no excuse
    assert check(h, check_final=False, race_window=1.0).count("capacity") == 1


def test_a_deleted_pod_within_the_window_excuses_the_bind() -> None:
    h = History()
    h.pod("p0")
    h.run("a")
    h.delete_pod("p0")
    h.bind("a", "p0")
    assert check(h, check_final=False).count("capacity") == 1
    assert check(h, check_final=False, race_window=1.0).raced_binds == 1


def test_a_bind_of_invalid_requests_is_caught() -> None:
    h = History()
    h.pod("p0")
    h.run("a", requests={"runs": "500m"})
    h.bind("a", "p0")
    assert check(h, check_final=False).count("capacity") == 1


def test_double_bind_without_reset_is_caught() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "4"})
    h.run("a")
    h.bind("a", "p0")
    h.status("a", "kubectl", verb="update", phase="Pending")  # pending again but the scheduler rebinds: ok
    h.bind("a", "p0")
    assert check(h, check_final=False).ok
    h2 = History()
    h2.pod("p0", capacity={"runs": "4"})
    h2.run("a")
    h2.bind("a", "p0")
    h2.bind("a", "p0")
    report = check(h2, check_final=False)
    assert report.count("double_bind") == 1
    assert report.violations[0].run == "default/a"


def test_rebind_after_a_retry_reset_is_fine() -> None:
    h = History()
    h.pod("p0")
    h.run("a")
    h.bind("a", "p0")
    h.reset("a")
    h.bind("a", "p0")
    assert check(h).ok


def test_write_discipline_catches_a_lost_update() -> None:
    """The scheduler overwrote a version that was no longer Pending: it did not carry its planned version."""
    h = History()
    h.pod("p0")
    h.run("a")
    h.bind("a", "p0")
    h.finish("a")
    h.wait("a", WAIT)  # would have been a 409 had it carried the version it planned from
    report = check(h, check_final=False)
    assert report.count("write_discipline") == 1
    assert "phase 'Succeeded'" in report.violations[0].detail


def test_write_discipline_catches_wrong_verbs_and_resources() -> None:
    h = History()
    h.pod("p0")
    h.run("a")
    h.status("a", SCHED, verb="update", phase="Pending", message=WAIT)  # a PUT of the status
    h.raw(RUNS, "update", {**h.objects[("runs", "a")], "spec": {"runtime": "python", "x": 1}}, SCHED)  # a spec write
    h.raw(PODS, "update", h.objects[("pods", "p0")], SCHED)  # the scheduler never writes pods
    h.raw(EVENTS, "create", {"metadata": {"name": "e", "namespace": "default"}}, SCHED)  # allowed
    report = check(h, check_final=False)
    assert report.count("write_discipline") == 3, report.summary()
    assert report.count("capacity") == 0


def test_leader_only_catches_a_standby_write() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "4"})
    h.lease("a")
    h.run("x")
    h.run("y")
    h.bind("x", "p0", agent="kruntimes-scheduler/a")
    h.bind("y", "p0", agent="kruntimes-scheduler/b")  # b is not the holder
    report = check(h, check_final=False)
    only(report, "leader_only")
    assert report.violations[0].run == "default/y"
    h.lease("b")
    h.run("z")
    h.bind("z", "p0", agent="kruntimes-scheduler/b")
    assert check(h, check_final=False).count("leader_only") == 1
    h.lease("")  # released: nobody may write
    h.run("w")
    h.bind("w", "p0", agent="kruntimes-scheduler/b")
    assert check(h, check_final=False).count("leader_only") == 2


def run_event(h: History, run: str, agent: str, verb: str = "create") -> None:
    """An Event about ``run``, as the recorder writes it (a patch bumps the count of an existing one)."""
    body = {"metadata": {"name": f"{run}.e", "namespace": "default"}, "involvedObject": {"kind": "Run", "namespace": "default", "name": run},
            "reason": "Scheduled", "count": 1}
    h.raw(EVENTS, verb, body, agent)


def test_leader_only_catches_an_event_written_by_a_deposed_leader_after_the_takeover() -> None:
    h = History()
    h.lease("a")
    h.run("x")
    run_event(h, "x", "kruntimes-scheduler/a")  # legal: a holds the lease
    assert check(h, check_final=False).ok
    h.lease("b")  # b took over (a was paused past its lease)
    run_event(h, "x", "kruntimes-scheduler/a", verb="patch")  # a resumed and flushed what it had queued
    report = check(h, check_final=False)
    only(report, "leader_only")
    [violation] = report.violations
    assert violation.run == "default/x"
    assert "patch events by 'a'" in violation.detail and "'b'" in violation.detail
    assert report.checked["leader_only"] == 2


def test_leader_only_catches_an_event_from_a_standby_and_one_from_before_anyone_held_the_lease() -> None:
    h = History()
    h.event(agent="kruntimes-scheduler/b")  # before the Lease exists: nobody holds it
    h.lease("a")
    h.event(agent="kruntimes-scheduler/b")
    h.event(agent="kruntimes-scheduler/a")
    report = check(h, check_final=False)
    assert report.count("leader_only") == 2, report.summary()
    assert [v.resource_version for v in report.violations] == [1, 3]
    assert all("(nobody)" in v.detail for v in report.violations[:1])


def test_leader_only_judges_the_lease_as_stored_not_its_renew_time() -> None:
    h = History()
    h.raw(LEASES, "update", {"metadata": {"name": "kruntimes-scheduler", "namespace": "default"},
                             "spec": {"holderIdentity": "a", "leaseDurationSeconds": 2, "renewTime": "2025-01-01T00:00:00.000000Z"}},
          "kruntimes-scheduler/a")
    h.advance(60.0)  # long past renewTime + leaseDurationSeconds, but nobody took the lease
    h.run("x")
    h.event(agent="kruntimes-scheduler/a")
    h.wait("x", WAIT, agent="kruntimes-scheduler/a")
    h.lease("b", agent="kruntimes-scheduler/b")  # a standby's acquisition is not a write it makes as leader
    report = check(h, check_final=False)
    assert report.ok, report.summary()
    assert report.checked["leader_only"] == 2


def test_only_an_event_composed_before_its_process_was_stopped_counts_as_in_flight() -> None:
    h = History()
    h.lease("a")
    h.run("x")
    stopped = h.time + 0.5
    h.advance(5.0)
    h.lease("b")  # a was stopped past its lease: b took over
    continued = h.time + 0.1
    h.advance(0.2)
    before = {"metadata": {"name": f"x.{int((stopped - 0.01) * 1e9):x}", "namespace": "default"},
              "involvedObject": {"kind": "Run", "namespace": "default", "name": "x"}}
    after = {"metadata": {"name": f"x.{int((continued + 0.05) * 1e9):x}", "namespace": "default"},
             "involvedObject": {"kind": "Run", "namespace": "default", "name": "x"}}
    h.raw(EVENTS, "create", before, "kruntimes-scheduler/a")  # past the gate when the SIGSTOP came
    h.raw(EVENTS, "create", after, "kruntimes-scheduler/a")  # written after the SIGCONT: a real violation
    run_event(h, "x", "kruntimes-scheduler/a", verb="patch")  # a patch says nothing of when it was made
    report = check(h, check_final=False)
    assert report.count("leader_only") == 3
    excused = in_flight_at_pause(h.records, report, [("a", stopped, continued)])
    assert [v.resource_version for v in excused] == [h.records[-3].resource_version]
    assert in_flight_at_pause(h.records, report, [("b", stopped, continued)]) == [], "only the stopped process's own writes"


def test_without_an_election_lease_in_the_history_events_are_not_judged() -> None:
    h = History()
    h.event(agent="kruntimes-scheduler/a")
    h.event(agent="kruntimes-scheduler/b")
    report = check(h, check_final=False)
    assert report.ok and report.checked["leader_only"] == 0


def shard_event(h: History, namespace: str, run: str, agent: str, verb: str = "create") -> None:
    """An Event about Run ``namespace/run``, written in the Run's namespace as the recorder does."""
    body = {"metadata": {"name": f"{run}.e", "namespace": namespace}, "involvedObject": {"kind": "Run", "namespace": namespace, "name": run},
            "reason": "Scheduled", "count": 1}
    h.raw(EVENTS, verb, body, agent)


def sharded(*members: str) -> History:
    """A history of sharded mode: every member has its membership Lease; Run x in ns1, y in ns2; one pod in each."""
    h = History()
    for identity in members:
        h.member(identity)
    h.run("x", namespace="ns1")
    h.run("y", namespace="ns2")
    return h


def test_shard_owner_passes_the_owners_writes() -> None:
    h = sharded("a", "b")
    h.assign("ns1", "a")
    h.assign("ns2", "b")
    h.wait("x", WAIT, agent="kruntimes-scheduler/a")
    shard_event(h, "ns1", "x", "kruntimes-scheduler/a")
    h.wait("y", WAIT, agent="kruntimes-scheduler/b")
    shard_event(h, "ns2", "y", "kruntimes-scheduler/b", verb="patch")
    h.member("a")  # renewals are Lease writes of their own, never judged by namespace
    report = check(h, check_final=False)
    assert report.ok, report.summary()
    assert report.checked["shard_owner"] == 4
    assert report.checked["leader_only"] == 0, "no election Lease: leader_only does not apply"


def test_shard_owner_catches_a_write_by_a_replica_that_does_not_hold_the_namespace() -> None:
    h = sharded("a", "b")
    h.assign("ns1", "a")
    h.wait("x", WAIT, agent="kruntimes-scheduler/b")  # b is live, but ns1 is a's
    report = check(h, check_final=False)
    only(report, "shard_owner")
    [violation] = report.violations
    assert violation.run == "ns1/x" and violation.resource_version == h.rv
    assert "by 'b' while the namespace was assigned to 'a'" in violation.detail
    h2 = sharded("a")
    shard_event(h2, "ns2", "y", "kruntimes-scheduler/a")  # nobody ever took ns2
    report = check(h2, check_final=False)
    only(report, "shard_owner")
    assert "assigned to '(nobody)'" in report.violations[0].detail


def test_shard_owner_catches_a_holder_whose_membership_was_deleted_after_it_acquired() -> None:
    h = sharded("a", "b")
    h.assign("ns1", "a")
    h.wait("x", WAIT, agent="kruntimes-scheduler/a")
    fence = h.member("a", delete_by="b")  # b judged a expired and fenced it; ns1 still names a
    h.bind("x", "p0", agent="kruntimes-scheduler/a")  # a resumed and wrote anyway
    shard_event(h, "ns1", "x", "kruntimes-scheduler/a")
    report = check(h, check_final=False)
    assert report.count("shard_owner") == 2 and report.ok is False, report.summary()
    assert all(v.invariant in ("shard_owner", "capacity") for v in report.violations), report.summary()  # no pod p0: capacity too
    first = next(v for v in report.violations if v.invariant == "shard_owner")
    assert f"deleted at rv={fence['metadata']['resourceVersion']}" in first.detail
    # the fenced replica comes back as a new member and takes the namespace again: its writes count once more
    h.member("a")
    h.assign("ns1", "a")
    h.wait("y", WAIT, agent="kruntimes-scheduler/b")  # y is in ns2: nobody holds it
    h.reset("x")
    h.wait("x", WAIT, agent="kruntimes-scheduler/a")
    assert check(h, check_final=False).count("shard_owner") == 3


def test_shard_owner_passes_a_release_and_the_new_owners_writes_and_catches_the_old_owners() -> None:
    h = sharded("a", "b")
    h.assign("ns1", "a")
    h.wait("x", WAIT, agent="kruntimes-scheduler/a")
    h.assign("ns1", "")  # a let go (holder cleared)
    h.assign("ns1", "b")  # b took it from the released version
    h.wait("x", messages.waiting_for_affinity("python"), agent="kruntimes-scheduler/b")
    shard_event(h, "ns1", "x", "kruntimes-scheduler/b")
    report = check(h, check_final=False)
    assert report.ok, report.summary()
    assert report.checked["shard_owner"] == 3
    shard_event(h, "ns1", "x", "kruntimes-scheduler/a", verb="patch")  # a flushed an Event after the handoff
    report = check(h, check_final=False)
    only(report, "shard_owner")
    assert "patch events in namespace 'ns1' by 'a' while the namespace was assigned to 'b'" in report.violations[0].detail


def test_shard_owner_sees_ownership_move_only_at_the_assignment_write() -> None:
    h = sharded("a", "b")
    h.assign("ns1", "a")
    h.member("a", delete_by="b")
    h.wait("x", WAIT, agent="kruntimes-scheduler/b")  # fenced a, but has not taken ns1 yet
    assert check(h, check_final=False).count("shard_owner") == 1
    h.assign("ns1", "b")
    h.wait("x", WAIT, agent="kruntimes-scheduler/b")
    assert check(h, check_final=False).count("shard_owner") == 1


def test_a_fenced_replicas_event_composed_before_its_pause_counts_as_in_flight() -> None:
    h = sharded("a", "b")
    h.assign("ns1", "a")
    stopped = h.time + 0.5
    h.advance(5.0)
    h.member("a", delete_by="b")
    h.assign("ns1", "b")
    continued = h.time + 0.1
    h.advance(0.2)
    involved = {"kind": "Run", "namespace": "ns1", "name": "x"}
    h.raw(EVENTS, "create", {"metadata": {"name": f"x.{int((stopped - 0.01) * 1e9):x}", "namespace": "ns1"}, "involvedObject": involved},
          "kruntimes-scheduler/a")  # past the gate when the SIGSTOP came
    h.raw(EVENTS, "create", {"metadata": {"name": f"x.{int((continued + 0.05) * 1e9):x}", "namespace": "ns1"}, "involvedObject": involved},
          "kruntimes-scheduler/a")  # composed after the SIGCONT: a real violation
    report = check(h, check_final=False)
    assert report.count("shard_owner") == 2, report.summary()
    excused = in_flight_at_pause(h.records, report, [("a", stopped, continued)])
    assert [v.resource_version for v in excused] == [h.records[-2].resource_version]


def test_write_discipline_accepts_shard_lease_writes_and_nothing_else_on_leases() -> None:
    h = sharded("a", "b")
    h.assign("ns1", "a")  # create
    h.assign("ns1", "", by="a")  # update (release)
    h.member("a")  # update (renewal)
    h.member("b", delete_by="a")  # delete (fence)
    h.member("a", delete_by="a")  # delete (graceful stop)
    report = check(h, check_final=False)
    assert report.ok, report.summary()
    assert report.checked["write_discipline"] == 7  # the two members' creates too
    h.lease("a")  # the election Lease ...
    h.raw(LEASES, "delete", h.objects[("leases", "kruntimes-scheduler")], SCHED)  # ... is never deleted by the scheduler
    h.raw(LEASES, "delete", {"metadata": {"name": "other", "namespace": "default"}}, SCHED)  # nor an unlabelled Lease
    assert check(h, check_final=False).count("write_discipline") == 2


def test_shard_leases_named_like_the_election_lease_do_not_turn_on_leader_only() -> None:
    h = sharded("a")
    h.raw(LEASES, "create", {"metadata": {"name": "kruntimes-scheduler", "namespace": "default",
                                          "labels": {"kruntimes.io/shard-group": "kruntimes-scheduler", "kruntimes.io/shard-role": "member"}},
                             "spec": {"holderIdentity": "b"}}, "kruntimes-scheduler/b")
    h.assign("ns1", "a")
    h.wait("x", WAIT, agent="kruntimes-scheduler/a")
    report = check(h, check_final=False)
    assert report.ok and report.checked["leader_only"] == 0, report.summary()


def test_final_state_catches_a_run_left_pending_with_room() -> None:
    h = History()
    h.pod("p0")
    h.run("a")
    report = check(h)
    only(report, "final_state")
    assert "a pod has room" in report.violations[0].detail and report.violations[0].pod == "p0"


def test_final_state_requires_the_truthful_wait_message() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "1"})
    h.run("a")
    h.run("b")
    h.run("c")
    h.bind("a", "p0")
    h.wait("b", WAIT)
    assert check(h).count("final_state") == 1  # c has no message at all
    h.wait("c", "waiting because of run a on p0 matching zone=blue")
    report = check(h)
    assert report.count("final_state") == 1 and "no truthful wait message" in report.violations[0].detail
    h.wait("c", messages.waiting_for_affinity("python"))  # one of the four forms, but not this Run's
    report = check(h)
    assert report.count("final_state") == 1 and "stale wait message" in report.violations[0].detail
    h.wait("c", WAIT)
    assert check(h).ok


def test_final_state_catches_a_run_that_should_have_failed() -> None:
    h = History()
    h.pod("p0")
    h.run("a", requests={"runs": "abc"})
    h.wait("a", WAIT)
    report = check(h)
    assert report.count("final_state") == 1 and "InvalidResources" in report.violations[0].detail


def test_final_state_checks_terminal_reasons_and_message_size() -> None:
    h = History()
    h.pod("p0")
    h.run("a", requests={"runs": "abc"})
    h.run("b", cancelRequested=True)
    h.fail("a", "InvalidResources", 'resource request "runs" must be a non-negative integer')
    h.fail("b", "Cancelled", "cancelled by user", phase="Cancelled")
    assert check(h).ok
    h.run("c")
    h.fail("c", "SomethingElse", "x" * 2000)
    report = check(h)
    assert report.count("final_state") == 2, report.summary()


def test_values_past_pythons_digits_are_judged_not_raised() -> None:
    # a backoff and quantities of 5,000 digits (more than int() converts); a pod annotation holding one
    huge = "1e" + "0" * 5000 + "1"
    h = History()
    h.pod("p0", capacity={"runs": "1", "cpu": huge})
    h.run("a", retryPolicy={"backoff": "9" * 5000 + "s"})
    h.run("b", requests={"cpu": huge})
    h.run("c")
    h.bind("c", "p0")
    h.run("d", requests={"cpu": huge})
    h.bind("d", "p0")  # binding a Run whose request is past the bounds: the checker must say so
    h.wait("a", WAIT)
    report = check(h)
    assert {(v.invariant, v.run) for v in report.violations} == {
        ("capacity", "default/d"), ("final_state", "default/a"), ("final_state", "default/b"),
    }, report.summary()
    assert all("InvalidSpec" in v.detail for v in report.violations if v.invariant == "final_state"), report.summary()


def test_runs_finished_by_others_and_runs_without_runtime_are_not_judged() -> None:
    h = History()
    h.pod("p0")
    h.run("a", runtime="")
    h.run("b")
    h.bind("b", "p0")
    h.finish("b")
    h.status("b", "runtimed", verb="update", phase="Failed")
    assert check(h).ok


def test_records_from_json_round_trip() -> None:
    h = History()
    h.pod("p0", capacity={"runs": "1"})
    h.run("a")
    h.run("b")
    h.bind("a", "p0")
    h.bind("b", "p0")
    items = [
        {
            "resourceVersion": r.resource_version, "type": r.event_type, "verb": r.verb, "group": r.resource.group,
            "resource": r.resource.plural, "subresource": r.subresource, "namespace": r.namespace, "name": r.name,
            "userAgent": r.user_agent, "time": r.time, "object": r.object,
        }
        for r in h.records
    ]
    assert check_history(records_from_json(items), CheckOptions(check_final=False)).counts() == check(h, check_final=False).counts()


def test_the_checker_is_pure() -> None:
    """``kruntimes.verify`` may import the pure core and the standard library's pure parts, never effects or I/O."""
    root = Path(__file__).resolve().parents[2] / "src" / "kruntimes" / "verify"
    forbidden = ("kruntimes.effects", "kruntimes.commands", "kruntimes.devcluster", "socket", "http", "subprocess", "threading", "os", "time")
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not any(name == f or name.startswith(f + ".") for f in forbidden), f"{path.name} imports {name}"
