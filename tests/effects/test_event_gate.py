"""Events are leader writes: none is queued, or sent, once the leader could have lost its Lease (SPEC §10)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import cast

from returns.result import Result

from kruntimes.kubeclient.kube import ApiError, JSONObject

from kruntimes.effects.events import RunEvents
from kruntimes.kubeclient.events import EventSettings
from kruntimes.kubeclient.leader import LeaderElector
from kruntimes.kubeclient.threads import Supervisor
from tests.effects.fakes import FakeClock
from tests.effects.test_controller_parts import FakeEvents, _run
from tests.effects.test_leader import FakeLeases, elected
from tests.polling import wait_until



def _names(kube: FakeEvents) -> list[str]:
    return [str(cast(Mapping[str, object], c["involvedObject"])["name"]) for c in kube.created]


def _leader(clock: FakeClock) -> LeaderElector:
    elector = elected(FakeLeases(), clock, "a", lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)
    assert elector.may_write()
    return elector


def _drain(recorder: RunEvents) -> None:
    recorder.start()
    try:
        assert recorder.flush(5)
    finally:
        recorder.stop()


def test_a_standby_queues_no_event() -> None:
    clock, kube = FakeClock(), FakeEvents()
    standby = elected(FakeLeases(), clock, "b", lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)
    standby._leading = False
    recorder = RunEvents(kube, clock=clock, may_write=lambda namespace: standby.may_write())
    assert not recorder.failed_scheduling(_run(), "waiting")
    recorder.scheduled(_run("s"), "pod-0")
    _drain(recorder)
    assert kube.created == [] and recorder.fenced == 2


def test_events_queued_before_the_leader_was_paused_past_its_lease_are_not_sent_when_it_resumes() -> None:
    clock, kube = FakeClock(), FakeEvents()
    leader = _leader(clock)
    recorder = RunEvents(kube, clock=clock, may_write=lambda namespace: leader.may_write())
    for i in range(3):
        recorder.scheduled(_run(f"r{i}"), "pod-0")
    clock.advance(3.5)  # SIGSTOP for 3.5 s: the writer thread runs again only now
    _drain(recorder)
    assert kube.created == [] and recorder.fenced == 3


def test_events_of_an_ended_term_are_dropped_even_if_the_process_leads_again() -> None:
    clock, kube = FakeClock(), FakeEvents()
    leader = _leader(clock)
    recorder = RunEvents(kube, clock=clock, may_write=lambda namespace: leader.may_write())
    recorder.scheduled(_run("old-0"), "pod-0")
    recorder.scheduled(_run("old-1"), "pod-0")
    assert recorder.end_term() == 2
    recorder.scheduled(_run("new"), "pod-0")  # re-elected: the gate is open again
    _drain(recorder)
    assert _names(kube) == ["new"]


def test_an_event_waiting_on_the_rate_limit_is_not_sent_after_the_lease_was_lost() -> None:
    clock, kube = FakeClock(), FakeEvents()
    leader = _leader(clock)

    def paused_while_waiting(seconds: float) -> None:
        clock.advance(seconds + 3.5)  # the process was stopped during the rate-limit wait

    recorder = RunEvents(kube, EventSettings(qps=1.0, burst=1), clock=clock, sleep=paused_while_waiting,
                             may_write=lambda namespace: leader.may_write())
    recorder.scheduled(_run("first"), "pod-0")
    recorder.scheduled(_run("second"), "pod-0")
    _drain(recorder)
    assert _names(kube) == ["first"]
    assert recorder.fenced == 1


def test_a_repeat_patch_is_fenced_like_a_create() -> None:
    clock, kube = FakeClock(), FakeEvents()
    leader = _leader(clock)
    recorder = RunEvents(kube, EventSettings(repeat_interval=1.0), clock=clock, may_write=lambda namespace: leader.may_write())
    recorder.failed_scheduling(_run(), "waiting")
    _drain(recorder)
    clock.advance(1.0)
    assert recorder.failed_scheduling(_run(), "waiting")  # queued while the gate is open...
    clock.advance(1.0)  # ...and past the renew deadline before the writer gets to it
    _drain(recorder)
    assert len(kube.created) == 1 and kube.patched == []
    assert recorder.fenced == 1


class _SlowEvents(FakeEvents):
    """Holds every create until released, so a test can look while an Event is on the wire."""

    def __init__(self) -> None:
        super().__init__()
        self.sending = threading.Event()
        self.release = threading.Event()

    def create(self, path: str, body: Mapping[str, object], *, read: bool = True) -> Result[JSONObject, ApiError]:
        self.sending.set()
        self.release.wait(5)
        return super().create(path, body)


def test_an_event_on_the_wire_keeps_its_namespace_busy_until_its_request_ends() -> None:
    """Sharded mode releases a namespace only when nothing of it is being written: an Event that
    passed the gate before the gate closed must have landed before the new owner may write."""
    kube = _SlowEvents()
    run = _run()
    recorder = RunEvents(kube, may_write=lambda namespace: True)
    recorder.scheduled(run, "pod-0")
    recorder.start()
    try:
        assert kube.sending.wait(5)
        assert recorder.writing(run.namespace) and not recorder.writing("elsewhere")
        kube.release.set()
        assert recorder.flush(5)
        assert not recorder.writing(run.namespace)
    finally:
        kube.release.set()
        recorder.stop()


class CursedEvents(FakeEvents):
    """An Events API client with a bug that raises for the Events of one Run."""

    def create(self, path: str, body: Mapping[str, object], *, read: bool = True) -> Result[JSONObject, ApiError]:
        if cast(Mapping[str, object], body["involvedObject"])["name"] == "cursed":
            raise TypeError("a bug in the client")
        return super().create(path, body)


def test_an_event_whose_write_raises_is_skipped_counted_and_the_writer_goes_on() -> None:
    kube, supervisor = CursedEvents(), Supervisor()
    recorder = RunEvents(kube, clock=FakeClock(), supervisor=supervisor)
    for name in ("before", "cursed", "after"):
        recorder.scheduled(_run(name), "pod-0")
    _drain(recorder)
    assert _names(kube) == ["before", "after"]
    assert supervisor.skips()[("event-recorder", "write")] == 1 and supervisor.failure is None


def _held_back(kube: FakeEvents) -> RunEvents:
    """A recorder whose writer sent "first" and now waits on the rate limit, for 1,000 s, to send "second"."""
    recorder = RunEvents(kube, EventSettings(qps=0.001, burst=1))
    recorder.scheduled(_run("first"), "pod-0")
    recorder.scheduled(_run("second"), "pod-0")
    recorder.start()
    wait_until(lambda: _names(kube) == ["first"] and recorder._queue.qsize() == 0, what="the writer waiting on the rate limit")
    return recorder


def test_a_stop_ends_the_writer_at_once_though_the_rate_limit_holds_an_event_and_that_event_is_not_sent() -> None:
    """At ``--event-qps 0.001`` the next token is 1,000 s away: the writer thread must not outlive the stop."""
    kube = FakeEvents()
    recorder = _held_back(kube)
    writer = recorder._thread
    assert writer is not None
    recorder.stop(timeout=5)
    assert not writer.is_alive(), "the writer thread outlived the stop, still waiting for its token"
    assert _names(kube) == ["first"] and recorder.fenced == 1


def test_a_flush_gives_up_at_once_on_an_event_the_rate_limit_holds_past_its_deadline() -> None:
    """A graceful stop flushes the term's Events for at most 2 s before it releases the Lease: it
    must not spend them waiting for a token that comes later (two replicas stopping took 8 s)."""
    kube = FakeEvents()
    recorder = _held_back(kube)
    try:
        started = time.monotonic()
        assert not recorder.flush(60)
        assert time.monotonic() - started < 30, "the flush waited out its deadline for a token 1,000 s away"
    finally:
        recorder.stop()
    assert _names(kube) == ["first"]
