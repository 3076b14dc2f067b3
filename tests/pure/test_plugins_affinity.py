"""RunAffinity: the pure predicates and the prepared filter (SPEC §4, Inter-Run Affinity)."""

from __future__ import annotations

from dataclasses import replace

from kruntimes.pure.model.objects import AffinityTerm, Run
from kruntimes.pure.model.objects import hosting_pods, selector_hosts
from kruntimes.pure.plugins.affinity import RunAffinity, seedable
from tests.builders import affinity_json, decoded_run, term
from tests.pure.planning_world import slot, snapshot, target


def required_term(run: Run) -> AffinityTerm:
    return run.affinity.required[0]


def test_hosting_pods_are_the_pods_of_matching_targets() -> None:
    run = decoded_run("r", affinity=affinity_json(required=[term({"app": "db"})]))
    targets = (target("p1", {"app": "db"}), target("p2", {"app": "web"}), target("p3", {"app": "db", "x": "y"}))
    assert hosting_pods(required_term(run), targets) == frozenset({"p1", "p3"})


def test_a_selector_the_found_hosts_lack_is_answered_from_the_targets() -> None:
    run = decoded_run("r", affinity=affinity_json(required=[term({"app": "db"})]))
    selector = required_term(run).selector
    targets = (target("p1", {"app": "db"}), target("p2", {"app": "web"}))
    snap = snapshot(run, (slot("p1"), slot("p2")), targets)
    assert selector_hosts(replace(snap, hosts={}), selector) == frozenset({"p1"})
    assert selector_hosts(replace(snap, hosts=None), selector) == frozenset({"p1"})


def test_a_term_is_seedable_only_without_targets_and_with_matching_own_labels() -> None:
    run = decoded_run("r", labels={"app": "db"}, affinity=affinity_json(required=[term({"app": "db"})]))
    db = required_term(run)
    assert seedable(db, (), run.labels)
    assert seedable(db, (target("p1", {"app": "web"}),), run.labels)
    assert not seedable(db, (target("p1", {"app": "db"}),), run.labels)
    assert not seedable(db, (target("p1", {"app": "db"}, assumed=True),), run.labels)
    assert not seedable(db, (), decoded_run("s", labels={"app": "web"}).labels)


def test_two_runs_requiring_each_others_labels_never_seed() -> None:
    a = decoded_run("a", labels={"team": "a"}, affinity=affinity_json(required=[term({"team": "b"})]))
    b = decoded_run("b", labels={"team": "b"}, affinity=affinity_json(required=[term({"team": "a"})]))
    assert not seedable(required_term(a), (), a.labels)
    assert not seedable(required_term(b), (), b.labels)


def test_a_cohort_seeds_then_follows_its_assumed_seed() -> None:
    """The first member starts anywhere; once it is assumed on p2, the next member must join it."""
    cohort = affinity_json(required=[term({"cohort": "x"})])
    first = decoded_run("first", labels={"cohort": "x"}, affinity=cohort)
    second = decoded_run("second", labels={"cohort": "x"}, affinity=cohort)
    pods = (slot("p1"), slot("p2"))
    seeded = RunAffinity().prepare(first, snapshot(first, pods)).unwrap()
    assert seeded is None  # every required term is seedable: the filter is skipped
    joined = RunAffinity().prepare(second, snapshot(second, pods, (target("p2", {"cohort": "x"}, assumed=True),))).unwrap()
    assert joined is not None
    assert [joined(p) for p in pods] == ["UnsatisfiedRunAffinity", None]


def test_a_run_without_required_terms_skips_the_filter() -> None:
    run = decoded_run("r", affinity=affinity_json(preferred=[(5, term({"app": "db"}))]))
    assert RunAffinity().prepare(run, snapshot(run, (slot("p1"),))).unwrap() is None


def test_anti_affinity_rejects_any_pod_hosting_a_match_of_any_term() -> None:
    run = decoded_run("r", affinity=affinity_json(anti_required=[term({"app": "db"}), term({"app": "web"})]))
    pods = (slot("p1"), slot("p2"), slot("p3"))
    pod_filter = RunAffinity().prepare(
        run, snapshot(run, pods, (target("p1", {"app": "db"}), target("p3", {"app": "web"})))
    ).unwrap()
    assert pod_filter is not None
    assert [pod_filter(p) for p in pods] == ["UnsatisfiedRunAntiAffinity", None, "UnsatisfiedRunAntiAffinity"]
