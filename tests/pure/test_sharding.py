"""The owner of every namespace: the same on every replica, even, and moved only as needed."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.sharding import assign, assignment_lease_name, group_problem, member_lease_name, owned_by, ranking

names = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=12)
namespaces = st.sets(names, max_size=60)
members = st.sets(names, min_size=1, max_size=8)


@given(namespaces, members)
def test_every_namespace_has_one_live_owner_and_nobody_holds_more_than_the_bound(ns: set[str], ms: set[str]) -> None:
    owners = assign(ns, ms)
    assert set(owners) == ns
    assert set(owners.values()) <= ms
    bound = math.ceil(len(ns) / len(ms)) if ns else 0
    assert all(len(owned_by(owners, m)) <= bound for m in ms)


@given(namespaces, members)
def test_the_answer_does_not_depend_on_the_order_replicas_read_things_in(ns: set[str], ms: set[str]) -> None:
    shuffled_ns, shuffled_ms = sorted(ns, reverse=True), sorted(ms, reverse=True)
    assert assign(shuffled_ns, shuffled_ms) == assign(ns, ms)


def test_forty_namespaces_split_ten_apiece_over_four_members() -> None:
    owners = assign([f"team-{i}" for i in range(40)], ["r-0", "r-1", "r-2", "r-3"])
    assert sorted(len(owned_by(owners, m)) for m in ("r-0", "r-1", "r-2", "r-3")) == [10, 10, 10, 10]


def test_a_member_that_leaves_gives_up_only_its_own_namespaces_when_the_bound_allows() -> None:
    ns = [f"team-{i}" for i in range(12)]
    before = assign(ns, ["a", "b", "c", "d"])
    after = assign(ns, ["a", "b", "c"])
    kept = [n for n in ns if before[n] != "d"]
    assert sum(1 for n in kept if after[n] == before[n]) >= len(kept) - 3  # a few move to keep it even
    assert all(after[n] in ("a", "b", "c") for n in ns)


def test_no_member_means_no_owner() -> None:
    assert assign(["x"], []) == {}


def test_ranking_is_a_permutation_of_the_members() -> None:
    assert sorted(ranking("team-1", ["b", "a", "c", "a"])) == ["a", "b", "c"]


def test_lease_names_are_valid_object_names_whatever_the_identity() -> None:
    assert member_lease_name("kruntimes-scheduler", "Pod-7f_1a2b3c") == "kruntimes-scheduler-member-pod-7f-1a2b3c"
    long = member_lease_name("g", "x" * 400)
    assert len(long) <= 253 and long.startswith("g-member-x")
    assert member_lease_name("g", "x" * 400) != member_lease_name("g", "x" * 399 + "y")
    assert assignment_lease_name("g", "team-a") == "g-ns-team-a"


def test_a_group_must_be_a_dns_label() -> None:
    assert group_problem("kruntimes-scheduler") is None
    assert group_problem("") is not None
    assert group_problem("Has_Upper") is not None
    assert group_problem("x" * 64) is not None
