"""The owner of every namespace: the same on every replica, even, and moved only as needed."""

from __future__ import annotations

import hashlib
import math
import re

import pytest
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


# --- The rules as docs/architecture.md states them ("Objects", "Owners"): replicas of two versions
# (a rolling upgrade) must compute the same Lease names and the same owners, so the rules are
# pinned here from the text, with the test's own sha256, not read back from the code.

_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _weight_by_the_docs(member: str, namespace: str) -> bytes:
    return hashlib.sha256((member + "/" + namespace).encode()).digest()


@given(names, members)
def test_a_lone_namespace_goes_to_the_member_with_the_highest_sha256_weight(namespace: str, ms: set[str]) -> None:
    best = max(ms, key=lambda m: _weight_by_the_docs(m, namespace))
    assert assign([namespace], ms) == {namespace: best}
    assert ranking(namespace, ms) == tuple(sorted(ms, key=lambda m: _weight_by_the_docs(m, namespace), reverse=True))


@given(st.text(max_size=300))
def test_a_member_lease_name_is_a_valid_object_name_for_any_identity(identity: str) -> None:
    name = member_lease_name("kruntimes-scheduler", identity)
    assert len(name) <= 253
    assert _OBJECT_NAME.fullmatch(name) is not None, name
    assert name.startswith("kruntimes-scheduler-member-")


@pytest.mark.parametrize(
    ("identity", "expected"),
    [
        ("Pod-7F", "g-member-pod-7f"),  # lower-cased
        ("_Pod_", "g-member-pod"),  # other characters become '-', never at the ends of a name
        ("a.b:c", "g-member-a-b-c"),
        ("a" * 244, "g-member-" + "a" * 244),  # 9 + 244 = 253: fits, kept whole
    ],
)
def test_a_member_lease_name_keeps_an_identity_that_fits(identity: str, expected: str) -> None:
    assert member_lease_name("g", identity) == expected


def test_an_identity_past_253_characters_is_cut_and_suffixed_with_10_hex_of_its_sha256() -> None:
    identity = "a" * 245  # 9 + 245 = 254: one too many
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    # Room for the identity: 253 - len("g-member-") - len("-") - 10 = 233 characters.
    assert member_lease_name("g", identity) == "g-member-" + "a" * 233 + "-" + digest
    assert len(member_lease_name("g", identity)) == 253


def test_a_cut_that_ends_on_a_dash_joins_the_digest_with_one_dash() -> None:
    identity = "a" * 232 + "-" + "b" * 50  # the first 233 characters end with the '-'
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    assert member_lease_name("g", identity) == "g-member-" + "a" * 232 + "-" + digest


def test_a_group_problem_says_what_is_wrong() -> None:
    """The sentence an operator reads after ``--shard-group '<group>'`` (docs/deploy.md: a DNS label,
    at most 63 characters); the sentences are the product's text, written out here as the operator sees them."""
    assert group_problem("a" * 63) is None
    assert group_problem("") == "must not be empty"
    label = "must be a DNS label: at most 63 lower-case letters, digits and '-', starting and ending alphanumeric"
    for bad in ("a" * 64, "Has_Upper", "-a", "a-"):
        assert group_problem(bad) == label, bad
