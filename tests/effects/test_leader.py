"""Lease leader election: one leader at a time, take-over after expiry, clean release, on simulated time."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import pytest
from returns.result import Failure, Result, Success

from kruntimes.kubeclient.kube import ApiError, JSONObject
from kruntimes.effects.logs import extra_fields
from kruntimes.kubeclient.leader import LeaderElectionConfig, LeaderElector, LeaseRecord, Sleeper, micro_time
from tests.effects.fakes import FakeClock, FakeSleeper

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/sched/leases/kruntimes-scheduler"
COLLECTION = "/apis/coordination.k8s.io/v1/namespaces/sched/leases"


@dataclass
class FakeLeases:
    """An in-memory Lease API with resourceVersion checks, and a switch to make it fail."""

    lease: JSONObject | None = None
    version: int = 0
    down: bool = False
    pinned: JSONObject | None = None
    """When set, every read returns this copy (to stage two candidates reading one version)."""
    writes: list[JSONObject] = field(default_factory=list)
    created: int = 0
    """Leases created so far: the next one's UID is ``uid-<created>``."""

    def lose_state(self) -> None:
        """A new server on the same address: no Lease, versions from the start."""
        self.lease, self.version = None, 0

    def restore(self, lease: JSONObject, version: int) -> None:
        """etcd back at an earlier revision: that Lease, and versions counted on from there."""
        self.lease, self.version = copy.deepcopy(lease), version

    def _unavailable(self) -> Result[JSONObject, ApiError]:
        return Failure(ApiError("transport", 0, "", "connection refused"))

    def get(self, path: str) -> Result[JSONObject, ApiError]:
        assert path == LEASE_PATH
        if self.down:
            return self._unavailable()
        if self.pinned is not None:
            return Success(copy.deepcopy(self.pinned))
        if self.lease is None:
            return Failure(ApiError("not_found", 404, "NotFound", "no lease"))
        return Success(copy.deepcopy(self.lease))

    def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
        assert path == COLLECTION
        if self.down:
            return self._unavailable()
        if self.lease is not None:
            return Failure(ApiError("already_exists", 409, "AlreadyExists", "exists"))
        return Success(self._store(dict(body)))

    def update(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
        assert path == LEASE_PATH
        if self.down:
            return self._unavailable()
        assert self.lease is not None
        metadata = body.get("metadata")
        assert isinstance(metadata, Mapping)
        if metadata.get("resourceVersion") != str(self.version):
            return Failure(ApiError("conflict", 409, "Conflict", "the object has been modified"))
        return Success(self._store(dict(body)))

    def _store(self, body: JSONObject) -> JSONObject:
        self.version += 1
        raw = body.get("metadata")
        metadata: dict[str, object] = dict(raw) if isinstance(raw, Mapping) else {}
        metadata["resourceVersion"] = str(self.version)
        if "uid" not in metadata:
            self.created += 1
            metadata["uid"] = f"uid-{self.created}"
        body["metadata"] = metadata
        self.lease = copy.deepcopy(body)
        self.writes.append(copy.deepcopy(body))
        return copy.deepcopy(body)

    def record(self) -> LeaseRecord:
        assert self.lease is not None
        return LeaseRecord.of(self.lease)


class Wall:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.origin = datetime(2025, 6, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.origin + timedelta(seconds=self.clock() - 1000.0)


@dataclass
class Candidate:
    elector: LeaderElector
    events: list[str]
    resets: list[str] = field(default_factory=list)
    """What ``on_server_reset`` was told."""


def candidate(leases: FakeLeases, clock: FakeClock, identity: str, sleeper: Sleeper | None = None) -> Candidate:
    events: list[str] = []
    resets: list[str] = []
    config = LeaderElectionConfig(namespace="sched", identity=identity)
    elector = LeaderElector(
        leases,
        config,
        lambda: events.append("started"),
        lambda: events.append("stopped"),
        clock=clock,
        now=Wall(clock),
        sleep=sleeper,
        on_server_reset=resets.append,
    )
    return Candidate(elector, events, resets)


def test_the_first_candidate_creates_the_lease_and_leads() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a = candidate(leases, clock, "a")
    assert a.elector.try_acquire_or_renew() == "leading"
    record = leases.record()
    assert (record.holder, record.lease_duration_seconds, record.transitions) == ("a", 15, 0)
    assert record.acquire_time == record.renew_time == "2025-06-01T00:00:00.000000Z"


def test_a_standby_waits_while_the_leader_renews() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a, b = candidate(leases, clock, "a"), candidate(leases, clock, "b")
    assert a.elector.try_acquire_or_renew() == "leading"
    for _ in range(20):
        assert b.elector.try_acquire_or_renew() == "held_by_other"
        clock.advance(2)
        assert a.elector.try_acquire_or_renew() == "leading"
    assert leases.record().holder == "a"
    assert b.elector.observed_holder == "a"


@pytest.mark.parametrize("huge", [2**40, 10**400])
def test_a_lease_duration_past_int32_is_the_candidates_own_not_a_crash(huge: int) -> None:
    # the Lease API holds int32; read as it stands, 2**40 s would keep a dead holder for 35,000
    # years, and 10**400 s raised OverflowError in the expiry arithmetic
    leases, clock = FakeLeases(), FakeClock()
    leases.lease = {"metadata": {"resourceVersion": "0"}, "spec": {"holderIdentity": "x", "leaseDurationSeconds": huge, "leaseTransitions": huge}}
    b = candidate(leases, clock, "b")
    assert b.elector.try_acquire_or_renew() == "held_by_other"
    clock.advance(16)
    assert b.elector.try_acquire_or_renew() == "leading"
    assert (leases.record().holder, leases.record().transitions) == ("b", 1)


def test_renewal_moves_renew_time_and_keeps_acquire_time() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a = candidate(leases, clock, "a")
    a.elector.try_acquire_or_renew()
    clock.advance(2.5)
    a.elector.try_acquire_or_renew()
    record = leases.record()
    assert record.acquire_time == "2025-06-01T00:00:00.000000Z"
    assert record.renew_time == "2025-06-01T00:00:02.500000Z"
    assert record.transitions == 0


def test_a_standby_takes_over_only_after_the_lease_went_unchanged_for_its_duration() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a, b = candidate(leases, clock, "a"), candidate(leases, clock, "b")
    a.elector.try_acquire_or_renew()
    assert b.elector.try_acquire_or_renew() == "held_by_other"  # b first sees the record now
    clock.advance(14.9)
    assert b.elector.try_acquire_or_renew() == "held_by_other"
    clock.advance(0.1)
    assert b.elector.try_acquire_or_renew() == "leading"
    record = leases.record()
    assert (record.holder, record.transitions) == ("b", 1)
    assert a.elector.try_acquire_or_renew() == "held_by_other"


def test_two_candidates_racing_on_a_stale_version_cannot_both_win() -> None:
    leases, clock = FakeLeases(), FakeClock()
    leases.lease = {"metadata": {"name": "kruntimes-scheduler", "resourceVersion": "0"}, "spec": {}}
    a, b = candidate(leases, clock, "a"), candidate(leases, clock, "b")
    leases.pinned = copy.deepcopy(leases.lease)  # both read the same version
    outcomes = {a.elector.try_acquire_or_renew(), b.elector.try_acquire_or_renew()}
    assert outcomes == {"leading", "held_by_other"}


def test_release_clears_the_holder_so_a_standby_takes_over_at_once() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a, b = candidate(leases, clock, "a"), candidate(leases, clock, "b")
    a.elector.try_acquire_or_renew()
    assert b.elector.try_acquire_or_renew() == "held_by_other"
    assert a.elector.release()
    assert leases.record().holder == ""
    assert b.elector.try_acquire_or_renew() == "leading"  # no lease duration to wait out


def test_release_by_a_non_holder_writes_nothing() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a, b = candidate(leases, clock, "a"), candidate(leases, clock, "b")
    a.elector.try_acquire_or_renew()
    b.elector.try_acquire_or_renew()
    writes = len(leases.writes)
    assert not b.elector.release()
    assert len(leases.writes) == writes


def test_run_leads_until_stopped_then_releases_and_reports_stopped() -> None:
    leases, clock = FakeLeases(), FakeClock()
    sleeper = FakeSleeper(clock, stop_after=5)
    a = candidate(leases, clock, "a", sleeper)
    assert a.elector.run() == "stopped"
    assert a.events == ["started", "stopped"]
    assert leases.record().holder == ""
    assert sleeper.sleeps == [2.0] * 5


def test_run_steps_down_when_it_cannot_renew_within_the_deadline() -> None:
    leases, clock = FakeLeases(), FakeClock()
    sleeper = FakeSleeper(clock)

    def outage_after_two_renewals(seconds: float) -> bool:
        if len(sleeper.sleeps) == 2:
            leases.down = True
        return sleeper(seconds)

    a = candidate(leases, clock, "a", outage_after_two_renewals)
    assert a.elector.run() == "lost"
    assert a.events == ["started", "stopped"]
    assert not a.elector.is_leader()
    # two good renewals, then failures until 10 s (the renew deadline) passed since the last one
    assert sum(sleeper.sleeps[2:]) == pytest.approx(10.0)


def test_run_steps_down_at_once_when_another_holder_took_the_lease() -> None:
    leases, clock = FakeLeases(), FakeClock()
    sleeper = FakeSleeper(clock)

    def usurp(seconds: float) -> bool:
        if len(sleeper.sleeps) == 1 and leases.lease is not None:
            leases.version += 1
            leases.lease = {
                "metadata": {"name": "kruntimes-scheduler", "resourceVersion": str(leases.version)},
                "spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 15},
            }
        return sleeper(seconds)

    a = candidate(leases, clock, "a", usurp)
    assert a.elector.run() == "lost"
    assert a.events == ["started", "stopped"]
    assert leases.record().holder == "intruder"  # a lost leader does not release someone else's lease


def settings(lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0) -> LeaderElectionConfig:
    return LeaderElectionConfig("sched", "a", lease_duration=lease_duration, renew_deadline=renew_deadline,
                                retry_period=retry_period)


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (settings(lease_duration=10.0, renew_deadline=10.0), "lease duration must be longer"),
        (settings(renew_deadline=2.0, retry_period=2.0), "renew deadline must be longer"),
        (settings(retry_period=0.0), "retry period must be positive"),
        (LeaderElectionConfig(namespace="sched", identity=""), "identity must not be empty"),
    ],
)
def test_bad_settings_are_refused_with_a_reason_not_an_exit(config: LeaderElectionConfig, problem: str) -> None:
    assert any(problem in p for p in config.problems())
    with pytest.raises(ValueError, match=problem):
        LeaderElector(FakeLeases(), config, lambda: None, lambda: None)


def test_micro_time_always_has_six_fractional_digits() -> None:
    assert micro_time(datetime(2025, 1, 1, tzinfo=timezone.utc)) == "2025-01-01T00:00:00.000000Z"


# --- the write gate: writes stop before anyone could take the lease ---


@dataclass
class Partition:
    """One candidate's view of the Lease API: cut off (every call fails) while ``cut``."""

    leases: FakeLeases
    cut: bool = False
    stall: float = 0.0
    """Seconds the next ``get`` takes (a renewal stuck in the network); the clock moves meanwhile."""
    clock: FakeClock | None = None
    during_stall: list[tuple[float, bool]] = field(default_factory=list)
    watcher: LeaderElector | None = None

    def get(self, path: str) -> Result[JSONObject, ApiError]:
        if self.stall and self.clock is not None:
            remaining, self.stall = self.stall, 0.0
            while remaining > 1e-9:  # look at the gate every 0.1 s of the stall
                step = min(0.1, remaining)
                self.clock.advance(step)
                remaining -= step
                if self.watcher is not None:
                    self.during_stall.append((self.clock(), self.watcher.may_write()))
        if self.cut:
            return Failure(ApiError("transport", 0, "", "connection refused"))
        return self.leases.get(path)

    def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
        if self.cut:
            return Failure(ApiError("transport", 0, "", "connection refused"))
        return self.leases.create(path, body)

    def update(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
        if self.cut:
            return Failure(ApiError("transport", 0, "", "connection refused"))
        return self.leases.update(path, body)


def elected(api: Partition | FakeLeases, clock: FakeClock, identity: str, *, lease_duration: float = 15.0,
            renew_deadline: float = 10.0, retry_period: float = 2.0) -> LeaderElector:
    """A candidate whose ``run`` loop is not used: tests drive its attempts by hand, as if it were leading."""
    config = LeaderElectionConfig("sched", identity, lease_duration=lease_duration, renew_deadline=renew_deadline,
                                  retry_period=retry_period)
    elector = LeaderElector(api, config, lambda: None, lambda: None, clock=clock, now=Wall(clock))
    if elector.try_acquire_or_renew() == "leading":
        elector._leading = True  # what run() does after a successful acquisition
    return elector


def test_the_write_gate_is_open_only_while_leading_and_freshly_renewed() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a = elected(leases, clock, "a")
    b = elected(leases, clock, "b")
    assert a.may_write()
    assert not b.may_write(), "a standby never writes"
    clock.advance(9.9)
    assert a.may_write()
    clock.advance(0.1)
    assert not a.may_write(), "10 s (the renew deadline) after the last renewal started"
    assert a.is_leader(), "the elector has not noticed yet; the gate does not wait for it to"
    assert a.try_acquire_or_renew() == "leading"
    assert a.may_write()


def test_a_renewal_that_stalls_closes_the_gate_before_the_lease_expires() -> None:
    leases, clock = FakeLeases(), FakeClock()
    view = Partition(leases, clock=clock)
    a = elected(view, clock, "a")
    acquired = clock()
    clock.advance(2.0)
    view.stall, view.watcher = 12.0, a  # the renewal started at +2 s answers only at +14 s
    assert a.try_acquire_or_renew() == "leading"
    closed = [at - acquired for at, open_ in view.during_stall if not open_]
    assert closed and closed[0] == pytest.approx(10.0), "closed at the renew deadline after the acquisition"
    assert all(not open_ for at, open_ in view.during_stall if at - acquired >= 10.0)
    assert closed[0] < 15.0, "before the 15 s lease could expire"
    # the late renewal counts from when it started (+2 s), not from when its answer came (+14 s)
    assert clock() - acquired == pytest.approx(14.0)
    assert not a.may_write()
    clock.advance(2.0)
    assert a.try_acquire_or_renew() == "leading"
    assert a.may_write()


def test_a_partitioned_leader_stops_writing_before_the_standby_can_take_over() -> None:
    leases, clock = FakeLeases(), FakeClock()
    view = Partition(leases)
    a = elected(view, clock, "a", lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)
    b = elected(leases, clock, "b", lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)
    clock.advance(0.3)
    assert a.try_acquire_or_renew() == "leading"
    view.cut = True
    last_write = takeover = None
    for _ in range(100):  # 10 s in 0.1 s steps; the standby retries every step (more often than it would)
        clock.advance(0.1)
        if a.may_write():
            last_write = clock()
        a.try_acquire_or_renew()
        if takeover is None and b.try_acquire_or_renew() == "leading":
            takeover = clock()
    assert last_write is not None and takeover is not None
    assert last_write < takeover
    assert takeover - last_write >= 0.4, "the margin between the renew deadline and the lease duration"


def test_losing_the_lease_to_another_holder_closes_the_gate_at_once() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a = elected(leases, clock, "a")
    assert leases.lease is not None
    leases.version += 1
    leases.lease = {
        "metadata": {"name": "kruntimes-scheduler", "resourceVersion": str(leases.version)},
        "spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 15},
    }
    assert a.try_acquire_or_renew() == "held_by_other"
    assert not a.may_write()


def test_releasing_the_lease_closes_the_gate() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a = elected(leases, clock, "a")
    assert a.release()
    assert not a.may_write()


# --- the Lease shows a server that lost its state ---


def test_a_leader_that_finds_its_lease_gone_creates_it_anew_and_reports_a_server_that_lost_its_state() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a = candidate(leases, clock, "a")
    for _ in range(3):
        assert a.elector.try_acquire_or_renew() == "leading"
        clock.advance(2)
    assert a.resets == [], "creating the first Lease and renewing it is no loss"
    leases.lose_state()  # the API server restarted without its data, on the same address
    assert a.elector.try_acquire_or_renew() == "leading"
    assert a.resets == ["lease_recreated"]
    clock.advance(2)
    assert a.elector.try_acquire_or_renew() == "leading"
    assert a.resets == ["lease_recreated"], "the new Lease is the one from now on"


def test_a_lease_back_at_an_older_version_is_reported_by_the_leader_and_the_standby() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a, b = candidate(leases, clock, "a"), candidate(leases, clock, "b")
    assert a.elector.try_acquire_or_renew() == "leading"
    snapshot, at_version = copy.deepcopy(leases.lease), leases.version
    assert snapshot is not None
    for _ in range(4):
        clock.advance(2)
        assert a.elector.try_acquire_or_renew() == "leading"
        assert b.elector.try_acquire_or_renew() == "held_by_other"
    leases.restore(snapshot, at_version)  # etcd restored from a snapshot taken before those renewals
    clock.advance(2)
    assert a.elector.try_acquire_or_renew() == "leading"
    assert b.elector.try_acquire_or_renew() == "held_by_other"
    assert (a.resets, b.resets) == (["resource_version_went_back"], ["resource_version_went_back"])
    clock.advance(2)
    assert a.elector.try_acquire_or_renew() == "leading"
    assert b.elector.try_acquire_or_renew() == "held_by_other"
    assert (a.resets, b.resets) == (["resource_version_went_back"], ["resource_version_went_back"])


def test_a_lease_recreated_with_another_uid_is_reported() -> None:
    leases, clock = FakeLeases(), FakeClock()
    a, b = candidate(leases, clock, "a"), candidate(leases, clock, "b")
    assert a.elector.try_acquire_or_renew() == "leading"
    assert b.elector.try_acquire_or_renew() == "held_by_other"
    leases.lease = None  # deleted; b's stand-in creates a new one at once
    clock.advance(20)
    assert b.elector.try_acquire_or_renew() == "leading"
    assert b.resets == ["lease_recreated"]
    assert a.elector.try_acquire_or_renew() == "held_by_other"
    assert a.resets == ["lease_replaced"]


# --- what a failing Lease says in the log ---


@dataclass
class ForbiddenLeases(FakeLeases):
    """RBAC without the Lease rules: every request refused, with the API server's reason."""

    refusal: ApiError = ApiError(
        "forbidden", 403, "Forbidden",
        'leases.coordination.k8s.io "kruntimes-scheduler" is forbidden: User "system:serviceaccount:x:y" cannot get resource "leases"',
    )

    def get(self, path: str) -> Result[JSONObject, ApiError]:
        return Failure(self.refusal)


def _lease_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "kruntimes.kubeclient.leader" and r.levelno >= logging.WARNING]


def test_a_lease_that_keeps_failing_is_a_warning_with_its_cause_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    leases, clock = ForbiddenLeases(), FakeClock()
    a = candidate(leases, clock, "a")
    with caplog.at_level(logging.DEBUG, logger="kruntimes.kubeclient.leader"):
        for _ in range(60):  # two minutes of attempts, one every retry period (2 s)
            assert a.elector.try_acquire_or_renew() == "error"
            clock.advance(2.0)
    warnings = _lease_lines(caplog)
    assert len(warnings) == 2
    first = extra_fields(warnings[0])
    assert first == {
        "lease": LEASE_PATH,
        "operation": "get",
        "error": f"forbidden (HTTP 403 Forbidden): {leases.refusal.message}",
        "kind": "forbidden",
        "unlogged_since_last": 0,
    }
    assert extra_fields(warnings[1])["unlogged_since_last"] == 29
    assert all(r.getMessage() == "lease request failed; retrying (said at most once a minute)" for r in warnings)
    held = [r for r in caplog.records if r.levelno == logging.DEBUG and r.getMessage() == "lease request failed"]
    assert len(held) == 58


def test_a_failed_create_and_a_failed_renewal_are_warnings_too(caplog: pytest.LogCaptureFixture) -> None:
    leases, clock = FakeLeases(), FakeClock()
    a = candidate(leases, clock, "a")
    leases.down = True
    with caplog.at_level(logging.INFO, logger="kruntimes.kubeclient.leader"):
        assert a.elector.try_acquire_or_renew() == "error"  # the get fails
        leases.down = False
        assert a.elector.try_acquire_or_renew() == "leading"
        real_update = leases.update
        leases.update = lambda path, body: Failure(ApiError("server", 500, "InternalError", "etcd is down"))  # type: ignore[method-assign]
        clock.advance(2.0)
        assert a.elector.try_acquire_or_renew() == "error"
        leases.update = real_update  # type: ignore[method-assign]
    operations = [(extra_fields(r)["operation"], extra_fields(r)["kind"]) for r in _lease_lines(caplog)]
    assert operations == [("get", "transport"), ("update", "server")]
