"""Sharded mode's membership on simulated time, against the dev cluster's real Lease semantics:
a handoff waits for the owner to let go, a paused owner is fenced only after its Lease expired
and finds its gate closed when it wakes, and nothing is decided from a failed read."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from returns.result import Failure, Result

from kruntimes.devcluster import DevCluster
from kruntimes.kubeclient.kube import LEASES, ApiError, JSONObject, Kube, load_configuration
from kruntimes.effects.sharding import ShardConfig, ShardMember
from kruntimes.kubeclient.threads import Supervisor
from kruntimes.pure.sharding import GROUP_LABEL, MEMBER_ROLE, ROLE_LABEL, member_lease_name, ranking

LEASE_NS = "default"


@dataclass
class Host:
    """Records what the member asked of the scheduler; ``busy`` namespaces have a cycle in flight."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    busy: set[str] = field(default_factory=set)

    def namespaces_known(self, namespaces: frozenset[str]) -> None:
        self.calls.append(("known", ",".join(sorted(namespaces))))

    def watch_namespace(self, namespace: str) -> None:
        self.calls.append(("watch", namespace))

    def settle(self) -> None:
        self.calls.append(("settle", ""))

    def namespace_synced(self, namespace: str) -> bool:
        return True

    def open_namespace(self, namespace: str) -> None:
        self.calls.append(("open", namespace))

    def close_namespace(self, namespace: str) -> None:
        self.calls.append(("close", namespace))

    def namespace_busy(self, namespace: str) -> bool:
        return namespace in self.busy

    def unwatch_namespace(self, namespace: str) -> None:
        self.calls.append(("unwatch", namespace))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Flaky:
    """A client whose lists fail while ``down`` (everything else passes through)."""

    kube: Kube
    down: bool = False
    before_list: Callable[[], None] = lambda: None
    """Called before every list: a round lists right after it renewed, so this sees the gate then."""

    def get(self, path: str) -> Result[JSONObject, ApiError]:
        return self.kube.get(path)

    def create(self, path: str, body: object) -> Result[JSONObject, ApiError]:
        return self.kube.create(path, body)  # type: ignore[arg-type]

    def update(self, path: str, body: object) -> Result[JSONObject, ApiError]:
        return self.kube.update(path, body)  # type: ignore[arg-type]

    def delete(self, path: str, *, resource_version: str = "") -> Result[JSONObject, ApiError]:
        return self.kube.delete(path, resource_version=resource_version)

    def list(
        self, path: str, params: object = None, *, page_size: int = 500
    ) -> Result[tuple[tuple[JSONObject, ...], str], ApiError]:
        self.before_list()
        if self.down:
            return Failure(ApiError("transport", 0, "", "connection refused"))
        return self.kube.list(path, params, page_size=page_size)  # type: ignore[arg-type]


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[Kube]:
    with DevCluster.start(simulator=None) as cluster:
        loaded = load_configuration(str(cluster.kubeconfig_path(tmp_path))).unwrap()
        client = Kube(loaded.configuration, request_timeout=10, user_agent="kruntimes-tests")
        yield client
        client.close()


def _preferring(member: str, others: tuple[str, ...]) -> str:
    """A namespace name whose rendezvous ranking puts ``member`` first among ``member`` + ``others``."""
    for i in range(1000):
        name = f"ns-{i}"
        if ranking(name, (member, *others))[0] == member:
            return name
    raise AssertionError("no such namespace")


def _member(kube: Kube | Flaky, identity: str, namespaces: tuple[str, ...], clock: Clock, host: Host) -> ShardMember:
    config = ShardConfig(
        lease_namespace=LEASE_NS, identity=identity, group="g", namespaces=namespaces,
        lease_duration=2.0, renew_deadline=1.5, retry_period=0.4,
    )
    return ShardMember(kube, config, host, clock=clock)


def _holder(kube: Kube, namespace: str) -> str:
    lease = kube.get(LEASES.path(LEASE_NS, f"g-ns-{namespace}")).unwrap()
    spec = lease.get("spec")
    assert isinstance(spec, dict)
    return str(spec.get("holderIdentity") or "")


def test_a_lone_member_takes_every_namespace_and_may_write_only_while_its_renewal_is_fresh(kube: Kube) -> None:
    clock, host = Clock(), Host()
    alone = _member(kube, "a", ("x", "y"), clock, host)
    alone.round()
    assert alone.owned == frozenset({"x", "y"})
    assert _holder(kube, "x") == _holder(kube, "y") == "a"
    # the round tells the host what exists, takes both, lets the host list once, then opens each
    assert host.calls == [("known", "x,y"), ("watch", "x"), ("watch", "y"), ("settle", ""), ("open", "x"), ("open", "y")]
    assert alone.may_write("x") and not alone.may_write("elsewhere")
    clock.now += 1.6  # past the renew deadline without a round: the gate closes by our own clock
    assert not alone.may_write("x")
    alone.round()  # the renewal is due and succeeds: open again
    assert alone.may_write("x")


def test_a_namespace_moves_only_after_its_owner_let_go_and_not_while_a_cycle_is_in_flight(kube: Kube) -> None:
    clock, host_a, host_b = Clock(), Host(), Host()
    moving = _preferring("b", ("a",))
    a = _member(kube, "a", (moving,), clock, host_a)
    a.round()
    assert a.owned == {moving}
    b = _member(kube, "b", (moving,), clock, host_b)
    b.round()
    assert not b.owned and _holder(kube, moving) == "a", "the owner is alive: the newcomer waits"
    host_a.busy.add(moving)
    clock.now += 0.1
    a.round()  # sees b: closes its gate at once, but keeps the assignment while a cycle runs
    assert not a.may_write(moving) and ("close", moving) in host_a.calls
    assert _holder(kube, moving) == "a"
    b.round()
    assert not b.owned
    host_a.busy.clear()
    clock.now += 0.1
    a.round()
    assert _holder(kube, moving) == "" and ("unwatch", moving) in host_a.calls
    b.round()
    assert b.owned == {moving} and b.may_write(moving) and _holder(kube, moving) == "b"


def test_a_paused_owner_is_fenced_after_its_lease_expires_and_never_writes_again_on_waking(kube: Kube) -> None:
    clock, host_a, host_b = Clock(), Host(), Host()
    staying = _preferring("a", ("b",))
    seen_open: list[bool] = []
    watched = Flaky(kube)
    a = _member(watched, "a", (staying,), clock, host_a)
    a.round()
    b = _member(kube, "b", (staying,), clock, host_b)
    b.round()
    assert a.owned == {staying} and not b.owned
    # a is paused (SIGSTOP): it runs no round; b goes on
    for _ in range(4):
        clock.now += 0.4
        b.round()
        assert not b.owned, "not before a's Lease expired on b's clock"
    clock.now += 0.5  # 2.1 s since b first saw a's last renewal
    b.round()
    assert b.owned == {staying} and _holder(kube, staying) == "b"
    assert kube.get(LEASES.path(LEASE_NS, member_lease_name("g", "a"))).failure().kind == "not_found"
    # a wakes up: its gate is already closed by its own clock, and its renewal finds the fence
    # (the update re-creates the Lease, as a Lease update of a missing object does): the gate
    # stays closed from the renewal on, before anything else is read
    assert not a.may_write(staying)
    watched.before_list = lambda: seen_open.append(a.may_write(staying))
    a.round()
    assert seen_open and not any(seen_open)
    assert not a.owned and ("unwatch", staying) in host_a.calls
    assert _holder(kube, staying) == "b"
    clock.now += 0.1
    a.round()  # back as a new member: it holds nothing until b lets go of what a now ranks first on
    assert not a.may_write(staying)


def test_a_round_whose_lists_fail_decides_nothing(kube: Kube) -> None:
    clock, host = Clock(), Host()
    flaky = Flaky(kube)
    member = _member(flaky, "a", ("x",), clock, host)
    member.round()
    assert member.owned == {"x"}
    flaky.down = True
    clock.now += 0.5
    member.round()  # cannot read the members: keeps what it holds, renews on
    assert member.owned == {"x"} and member.may_write("x")


def test_the_round_after_a_lease_expires_runs_at_that_expiry_not_at_the_next_regular_round(kube: Kube) -> None:
    clock, host_a, host_b = Clock(), Host(), Host()
    staying = _preferring("a", ("b",))
    a = _member(kube, "a", (staying,), clock, host_a)
    a.round()
    b = _member(kube, "b", (staying,), clock, host_b)
    b.round()
    seen_at = clock.now  # b saw a's last renewal now; a is paused from here on
    assert b.next_round(clock.now + 0.1) == clock.now + 0.1, "a's Lease is fresh: the regular round"
    clock.now += 1.95
    wake = b.next_round(clock.now + 0.1)
    assert seen_at + 2.0 < wake < clock.now + 0.1, "a's Lease expires before the next regular round"
    clock.now = wake
    b.round()
    assert b.owned == {staying} and _holder(kube, staying) == "b"


@dataclass
class SlowHost(Host):
    """A host whose namespaces' informers sync only when the test says so."""

    synced: set[str] = field(default_factory=set)

    def namespace_synced(self, namespace: str) -> bool:
        return namespace in self.synced


def test_a_namespace_opens_as_soon_as_its_informers_sync_without_reading_a_lease(kube: Kube) -> None:
    clock, host = Clock(), SlowHost()
    lists: list[str] = []
    counted = Flaky(kube, before_list=lambda: lists.append("list"))
    member = _member(counted, "a", ("x",), clock, host)
    member.round()
    assert ("watch", "x") in host.calls and not member.owned, "taken, but its informers have not listed yet"
    listed = len(lists)
    host.synced.add("x")
    member.open_synced()  # what the informer's first list nudges the loop to do
    assert member.owned == {"x"} and member.may_write("x") and ("open", "x") in host.calls
    assert len(lists) == listed


class BrokenHost(Host):
    """A host with a bug that every full round meets."""

    def namespaces_known(self, namespaces: frozenset[str]) -> None:
        raise RuntimeError("a bug every round meets")


class Ticking(Clock):
    """Simulated time that moves a tenth of a second on at every reading."""

    def __call__(self) -> float:
        self.now += 0.1
        return self.now


def test_rounds_that_keep_raising_for_the_renew_deadline_end_the_membership_loop(kube: Kube) -> None:
    """Each failed round is counted; once every round raised for the renew deadline (1.5 s) the
    loop ends with the error, for the supervisor to restart the process, rather than keep a member
    that hands nothing over."""
    supervisor = Supervisor()
    config = ShardConfig(
        lease_namespace=LEASE_NS, identity="a", group="g", namespaces=("x",),
        lease_duration=2.0, renew_deadline=1.5, retry_period=0.4,
    )
    member = ShardMember(kube, config, BrokenHost(), clock=Ticking(), supervisor=supervisor)
    thread = supervisor.thread(member.run, "control")
    thread.start()
    thread.join(30)
    ended = not thread.is_alive()
    member.stop()
    thread.join(10)
    assert ended, "the loop went on with a round that always raises"
    assert supervisor.failure == "control"
    assert supervisor.skips()[("control", "round")] >= 2, "each failed round is counted"


def test_a_membership_lease_whose_duration_is_past_int32_is_judged_by_our_own_duration(kube: Kube) -> None:
    # the Lease API holds int32; read as it stands, 2**40 s would keep a dead member for 35,000
    # years (and 10**400 s, which a server could hold, raised OverflowError in the round)
    body = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": member_lease_name("g", "z"), "labels": {GROUP_LABEL: "g", ROLE_LABEL: MEMBER_ROLE}},
        "spec": {"holderIdentity": "z", "leaseDurationSeconds": 2**40},
    }
    kube.create(LEASES.path(LEASE_NS), body).unwrap()
    clock, host = Clock(), Host()
    alone = _member(kube, "a", ("x",), clock, host)
    alone.round()
    assert alone.members == 2  # z counts while its Lease is fresh by our clock
    clock.now += 2.5  # past our own 2 s lease duration, z never renewed
    alone.round()
    assert alone.members == 1 and alone.owned == frozenset({"x"})
