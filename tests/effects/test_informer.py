"""Informers: list, watch, bookmarks, 410 relist diffs, malformed objects and back-off — on simulated time."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import pytest
from returns.result import Failure, Result, Success

from kruntimes.kubeclient.atom import Atom
from kruntimes.effects.informer import (
    MAX_FIELD_SELECTOR,
    Informer,
    NamespaceScope,
    OnEvent,
    Watched,
    slim_run,
    watched_pods,
    watched_runs,
    watched_workspaces,
)
from kruntimes.effects.logs import extra_fields
from kruntimes.kubeclient.kube import (
    RUNS,
    ApiError,
    ErrorKind,
    JSONObject,
    KubeError,
    WatchEvent,
    WatchEventType,
    error_from_status,
    parse_watch_stream,
)
from kruntimes.kubeclient.threads import Supervisor
from kruntimes.kubeclient.workqueue import ExponentialDelay
from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event, apply
from kruntimes.pure.model.objects import Object, RunKey
from kruntimes.pure.readers.kube import DecodeError, decode_run
from tests.effects.fakes import FakeClock, FakeSleeper
from tests.polling import wait_until

NS = "ns"


def run_json(name: str, rv: str, phase: str = "Pending", runtime: str = "py") -> JSONObject:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"runtime": runtime},
        "status": {"phase": phase},
    }


def pod_json(name: str, rv: str, runtime: str = "py") -> JSONObject:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "labels": {"runtime": runtime},
        },
        "status": {"phase": "Running"},
    }


def event(type_: WatchEventType, obj: JSONObject) -> WatchEvent:
    return WatchEvent(type_, obj)


def bookmark(rv: str) -> WatchEvent:
    return WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": rv}})


def error(kind: ErrorKind, status: int, retry_after: float | None = None) -> KubeError:
    return KubeError(ApiError(kind, status, "", kind, retry_after))


Script = Sequence[WatchEvent | KubeError]


@dataclass
class FakeKube:
    """Scripted lists and watches; stops the informer when the scripts run out."""

    lists: list[Result[tuple[tuple[JSONObject, ...], str], ApiError]]
    watches: list[Script]
    sleeper: FakeSleeper
    listed: list[tuple[str, Mapping[str, str] | None]] = field(default_factory=list)
    watched_from: list[str] = field(default_factory=list)
    watch_params: list[Mapping[str, str] | None] = field(default_factory=list)
    informer: Informer | None = None

    def _next_watch(self, resource_version: str, params: Mapping[str, str] | None) -> Script | None:
        """Record a watch and take its script; ``None`` (and the informer stopped) when none is left."""
        self.watched_from.append(resource_version)
        self.watch_params.append(params)
        if not self.watches:
            self._exhausted()
            return None
        return self.watches.pop(0)

    def _exhausted(self) -> None:
        self.sleeper.stopped.set()
        if self.informer is not None:
            self.informer.stop()

    def list(
        self, path: str, params: Mapping[str, str] | None = None, *, page_size: int = 500
    ) -> Result[tuple[tuple[JSONObject, ...], str], ApiError]:
        self.listed.append((path, params))
        if not self.lists:
            self._exhausted()
            return Failure(ApiError("transport", 0, "", "script exhausted"))
        return self.lists.pop(0)

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
        params: Mapping[str, str] | None = None,
    ) -> Iterator[WatchEvent]:
        return self._stream(resource_version, params)

    def _stream(self, resource_version: str, params: Mapping[str, str] | None) -> Iterator[WatchEvent]:
        """The script's events, taken when first iterated (as a real watch sends its request)."""
        script = self._next_watch(resource_version, params)
        if script is None:
            return
        for item in script:
            if isinstance(item, KubeError):
                raise item
            yield item
        self.sleeper.clock.advance(60)  # the server's watch timeout passed


@dataclass
class Harness:
    kube: FakeKube
    informer: Informer
    state: Atom[ClusterState]
    seen: list[tuple[ClusterState, ClusterState, Event]]
    sleeper: FakeSleeper

    def run(self) -> None:
        self.informer.run()


def harness(
    lists: list[Result[tuple[tuple[JSONObject, ...], str], ApiError]],
    watches: list[Script],
    watched: Watched | None = None,
    on_event: OnEvent | None = None,
    on_synced: Callable[[], None] | None = None,
    supervisor: Supervisor | None = None,
) -> Harness:
    clock = FakeClock()
    sleeper = FakeSleeper(clock)
    kube = FakeKube(lists, watches, sleeper)
    state = Atom(EMPTY_STATE)
    seen: list[tuple[ClusterState, ClusterState, Event]] = []
    informer = Informer(
        kube,
        watched or watched_runs(),
        state,
        on_event or (lambda old, new, ev: seen.append((old, new, ev))),
        clock=clock,
        sleep=sleeper,
        on_synced=on_synced,
        supervisor=supervisor,
    )
    kube.informer = informer
    return Harness(kube, informer, state, seen, sleeper)


def listing(*items: JSONObject, rv: str) -> Result[tuple[tuple[JSONObject, ...], str], ApiError]:
    return Success((tuple(items), rv))


def kinds(h: Harness) -> list[tuple[str, str]]:
    return [(ev.type, ev.obj.name) for _, _, ev in h.seen]


def test_list_then_watch_from_the_lists_version_applies_each_event_once() -> None:
    h = harness(
        [listing(run_json("a", "5"), rv="10")],
        [[event("ADDED", run_json("b", "11")), event("MODIFIED", run_json("a", "12", phase="Scheduled"))]],
    )
    assert not h.informer.has_synced()
    h.run()
    assert h.informer.has_synced()
    assert h.kube.watched_from[0] == "10"
    assert kinds(h) == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a")]
    state = h.state.get()
    run_a = state.run(RunKey(NS, "a"))
    assert run_a is not None and run_a.status.phase == "Scheduled"
    assert state.run(RunKey(NS, "b")) is not None


def test_the_synced_hook_runs_once_after_the_first_list_is_applied_not_after_relists() -> None:
    calls: list[int] = []
    h: Harness | None = None

    def synced() -> None:
        assert h is not None
        calls.append(len(list(h.state.get().runs())))

    h = harness(
        [listing(run_json("a", "1"), rv="5"), listing(run_json("a", "1"), run_json("b", "6"), rv="9")],
        [[error("gone", 410)]],
        on_synced=synced,
    )
    h.run()
    assert h.informer.relists == 1
    assert calls == [1], "once, with the first list already in the state"


def test_the_callback_sees_the_state_before_and_after_each_event() -> None:
    h = harness([listing(rv="1")], [[event("ADDED", run_json("a", "2"))]])
    h.run()
    [(old, new, ev)] = h.seen
    assert old.run(RunKey(NS, "a")) is None
    assert new.run(RunKey(NS, "a")) is ev.obj
    assert h.state.get() is new


def test_a_rewatch_continues_from_the_last_event_or_bookmark_version() -> None:
    h = harness(
        [listing(rv="10")],
        [[event("ADDED", run_json("a", "11")), bookmark("15")], [event("DELETED", run_json("a", "16"))], []],
    )
    h.run()
    assert h.kube.watched_from[:3] == ["10", "15", "16"]
    assert kinds(h) == [("ADDED", "a"), ("DELETED", "a")]
    assert h.state.get().run(RunKey(NS, "a")) is None


def test_gone_relists_and_turns_the_difference_into_events() -> None:
    h = harness(
        [
            listing(run_json("a", "1"), run_json("b", "1"), run_json("c", "1"), rv="5"),
            listing(run_json("a", "7"), run_json("c", "1"), run_json("d", "6"), rv="9"),
        ],
        [[error("gone", 410)]],
    )
    h.run()
    assert kinds(h)[:3] == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    assert sorted(kinds(h)[3:]) == [("ADDED", "d"), ("DELETED", "b"), ("MODIFIED", "a")]
    assert h.informer.relists == 1
    assert h.kube.watched_from[-1] == "9"
    names = sorted(run.name for run in h.state.get().runs())
    assert names == ["a", "c", "d"]
    # a relist after 410 waits for nothing: the only sleep follows the end of the script
    assert h.sleeper.sleeps == [0.8]


def test_malformed_objects_are_skipped_and_counted_never_fatal() -> None:
    nameless: JSONObject = {"metadata": {"namespace": NS, "uid": "u"}}
    h = harness(
        [listing(nameless, run_json("a", "1"), rv="3")],
        [[event("ADDED", {"metadata": "not an object"}), event("ADDED", run_json("b", "4"))]],
    )
    h.run()
    assert h.informer.malformed == 2
    assert kinds(h) == [("ADDED", "a"), ("ADDED", "b")]
    assert h.informer.resource_version == "4"


SECRET = "tenant-secret-label-value"


def hostile_run_json(name: str, rv: str) -> JSONObject:
    """A Run whose decoding the test makes raise, with an exception message quoting a label."""
    body = run_json(name, rv)
    body["metadata"] = {**cast(dict[str, object], body["metadata"]), "labels": {"k": SECRET}}
    return body


def raising_for(*names: str) -> Callable[[object], Result[Object, DecodeError]]:
    """``decode_run``, but a bug (an exception quoting the object) for the Runs called ``names``."""

    def decode(raw: object) -> Result[Object, DecodeError]:
        meta = cast(dict[str, object], cast(dict[str, object], raw)["metadata"])
        if meta["name"] in names:
            raise ValueError(f"invalid literal for int() with base 10: {meta['labels']!r}")
        return decode_run(raw)

    return decode


def test_an_object_whose_decoding_raises_is_skipped_counted_and_logged_by_its_key_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Listed (the first list after a restart meets it again) or watched, the object is skipped;
    every other object is applied and the informer goes on watching."""
    supervisor = Supervisor()
    h = harness(
        [listing(hostile_run_json("listed", "1"), run_json("a", "2"), rv="3")],
        [[event("ADDED", hostile_run_json("watched", "4")), event("ADDED", run_json("b", "5"))]],
        watched=Watched("runs", RUNS, raising_for("listed", "watched")),
        supervisor=supervisor,
    )
    with caplog.at_level(logging.ERROR):
        h.run()
    assert h.informer.has_synced() and kinds(h) == [("ADDED", "a"), ("ADDED", "b")]
    assert h.informer.resource_version == "5", "the watch went on past the object it skipped"
    assert supervisor.skips()[("informer-runs", "decode")] == 2 and supervisor.failure is None
    logged = [r for r in caplog.records if r.name == "kruntimes.kubeclient.threads"]
    assert [getattr(r, "object") for r in logged] == [f"{NS}/listed", f"{NS}/watched"]
    assert all("ValueError" in str(getattr(r, "error")) for r in logged)
    assert SECRET not in caplog.text + "".join(str(r.__dict__) for r in caplog.records)


def test_an_object_the_state_cannot_take_is_skipped_and_taken_by_its_next_event(monkeypatch: pytest.MonkeyPatch) -> None:
    failed: list[str] = []

    def apply_once_failing(state: ClusterState, ev: Event) -> ClusterState:
        if ev.obj.name == "b" and not failed:
            failed.append(ev.obj.name)
            raise KeyError("a bug in the state's indexes")
        return apply(state, ev)

    monkeypatch.setattr("kruntimes.effects.informer.apply", apply_once_failing)
    supervisor = Supervisor()
    h = harness(
        [listing(run_json("a", "1"), rv="1")],
        [[event("ADDED", run_json("b", "2")), event("ADDED", run_json("c", "3")),
          event("MODIFIED", run_json("b", "4", phase="Scheduled"))]],
        supervisor=supervisor,
    )
    h.run()
    assert failed == ["b"] and supervisor.skips()[("informer-runs", "apply")] == 1
    assert kinds(h) == [("ADDED", "a"), ("ADDED", "c"), ("MODIFIED", "b")], "no callback for what was not applied"
    run_b = h.state.get().run(RunKey(NS, "b"))
    assert run_b is not None and run_b.status.phase == "Scheduled"


def test_a_failure_outside_one_objects_handling_is_the_threads_and_the_supervisor_hears_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    supervisor = Supervisor()
    heard: list[str] = []
    supervisor.on_failure(heard.append)
    h = harness([listing(run_json("a", "1"), rv="1")], [[event("ADDED", run_json("b", "2"))]], supervisor=supervisor)

    def broken_watch() -> None:
        raise RuntimeError("a bug in the watch loop")

    monkeypatch.setattr(h.informer._reflector, "_watch", broken_watch)  # the loop itself
    thread = h.informer.start()
    thread.join(10)
    assert not thread.is_alive() and h.informer.has_synced()
    assert supervisor.failure == "informer-runs" and heard == ["informer-runs"]


def test_dropped_connections_back_off_exponentially_and_reset_after_progress() -> None:
    h = harness(
        # after each failed watch, a read of the collection's version (served here as a listing)
        [listing(rv="1"), listing(rv="1"), listing(rv="1"), listing(rv="1"), listing(rv="2"), listing(rv="2")],
        [
            [error("transport", 0)],
            [error("transport", 0)],
            [error("server", 500)],
            [event("ADDED", run_json("a", "2")), error("transport", 0)],
            [error("transport", 0)],
        ],
    )
    h.run()
    assert h.sleeper.sleeps[:5] == [0.8, 1.6, 3.2, 0.8, 1.6]
    assert h.kube.watched_from[:5] == ["1", "1", "1", "1", "2"]


def test_a_failed_list_is_retried_with_back_off_before_watching() -> None:
    h = harness(
        [Failure(ApiError("forbidden", 403, "Forbidden", "rbac")), listing(run_json("a", "1"), rv="2")],
        [[]],
    )
    h.run()
    assert h.sleeper.sleeps[0] == 0.8
    assert h.informer.has_synced()
    assert h.kube.watched_from[0] == "2"


def test_throttling_waits_at_least_the_servers_retry_after() -> None:
    h = harness([listing(rv="1")], [[error("throttled", 429, retry_after=7.0)], []])
    h.run()
    assert h.sleeper.sleeps[0] == 7.0


class InstantWatches(FakeKube):
    """A server that closes every watch at once without an event."""

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
        params: Mapping[str, str] | None = None,
    ) -> Iterator[WatchEvent]:
        self.watched_from.append(resource_version)
        if len(self.watched_from) >= 3:
            self._exhausted()
        return iter(())


def test_a_watch_that_ends_at_once_without_events_backs_off_instead_of_spinning() -> None:
    clock = FakeClock()
    sleeper = FakeSleeper(clock)
    kube = InstantWatches([listing(rv="1")], [], sleeper)
    informer = Informer(kube, watched_runs(), Atom(EMPTY_STATE), clock=clock, sleep=sleeper)
    kube.informer = informer
    informer.run()
    assert sleeper.sleeps[:2] == [0.8, 1.6]


def test_a_callback_that_raises_does_not_stop_the_informer() -> None:
    calls: list[str] = []

    def broken(old: ClusterState, new: ClusterState, ev: Event) -> None:
        calls.append(ev.obj.name)
        raise RuntimeError("bug in the controller")

    events: Script = [event("ADDED", run_json("a", "2")), event("ADDED", run_json("b", "3"))]
    h = harness([listing(rv="1")], [events], on_event=broken)
    h.run()
    assert calls == ["a", "b"]
    assert h.state.get().run(RunKey(NS, "b")) is not None


def test_pods_are_listed_and_watched_by_the_runtime_label_only() -> None:
    h = harness([listing(pod_json("p1", "1"), rv="2")], [[event("ADDED", pod_json("p2", "3"))]], watched_pods())
    h.run()
    assert h.kube.listed[0] == ("/api/v1/pods", {"labelSelector": "runtime"})
    assert h.kube.watch_params[0] == {"labelSelector": "runtime"}
    assert {pod.name for pod in h.state.get().pods()} == {"p1", "p2"}


def test_a_namespaced_informer_watches_that_namespace_only() -> None:
    assert watched_runs("team-a").path == "/apis/kruntimes.io/v1alpha1/namespaces/team-a/runs"
    assert watched_workspaces().path == "/apis/kruntimes.io/v1alpha1/persistentworkspaces"


def test_stop_ends_a_back_off_sleep_at_once_on_the_real_sleeper() -> None:
    clock = FakeClock()
    kube = FakeKube([Failure(ApiError("transport", 0, "", "down"))] * 1000, [], FakeSleeper(clock))
    informer = Informer(kube, watched_runs(), Atom(EMPTY_STATE), clock=clock, backoff=ExponentialDelay(base=3600.0, cap=3600.0))
    thread = informer.start()
    informer.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()



def test_a_requested_relist_follows_the_watch_and_serves_the_ticket() -> None:
    tickets: list[int] = []
    informer_box: list[Informer] = []

    def on_event(old: ClusterState, new: ClusterState, ev: Event) -> None:
        if ev.obj.name == "b" and not tickets:  # seen on the watch: ask for a fresh list now
            tickets.append(informer_box[0].request_relist())

    h = harness(
        [listing(run_json("a", "1"), rv="5"), listing(run_json("a", "8"), run_json("b", "6"), run_json("c", "7"), rv="9")],
        [[event("ADDED", run_json("b", "6"))], []],
        on_event=on_event,
    )
    informer_box.append(h.informer)
    h.run()
    assert len(h.kube.listed) >= 2, "the request made the informer list again"
    assert tickets and h.informer.wait_relisted(tickets[0], timeout=0)
    assert sorted((run.name, run.resource_version) for run in h.state.get().runs()) == [("a", "8"), ("b", "6"), ("c", "7")]
    assert h.kube.watched_from[1] == "9", "the watch resumes from the relist"
    # the relist was not a back-off: nothing slept before it
    assert h.sleeper.sleeps[:1] == [0.8] and len(h.sleeper.sleeps) == 1


def test_a_relist_request_ends_a_back_off_sleep_on_the_real_sleeper() -> None:
    clock = FakeClock()
    lists = [listing(run_json("a", "1"), rv="2"), listing(run_json("a", "3"), rv="4")]
    failing: list[Script] = [[error("server", 500)] for _ in range(50)]
    kube = FakeKube(lists, failing, FakeSleeper(clock))
    informer = Informer(kube, watched_runs(), Atom(EMPTY_STATE), clock=clock, backoff=ExponentialDelay(base=3600.0, cap=3600.0))
    thread = informer.start()
    try:
        assert informer.wait_for_sync(10)
        assert wait_until(lambda: len(kube.watched_from) >= 1, timeout=10), "the first watch failed; now sleeping an hour"
        ticket = informer.request_relist()
        assert informer.wait_relisted(ticket, timeout=10), "the relist did not wait out the back-off"
        assert len(kube.listed) == 2
    finally:
        informer.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_relist_asked_for_before_a_failure_does_not_cut_the_back_off_after_it_short() -> None:
    clock = FakeClock()
    lists = [listing(run_json("a", "1"), rv="2"), listing(run_json("a", "3"), rv="4")]
    failing: list[Script] = [[error("server", 500)] for _ in range(50)]
    kube = FakeKube(lists, failing, FakeSleeper(clock))
    informer = Informer(kube, watched_runs(), Atom(EMPTY_STATE), clock=clock, backoff=ExponentialDelay(base=3600.0, cap=3600.0))
    ticket = informer.request_relist()  # served by the first list
    thread = informer.start()
    try:
        assert informer.wait_relisted(ticket, timeout=10)
        assert wait_until(lambda: len(kube.watched_from) >= 1, timeout=10)
        # the watch failed: an hour's back-off, not a retry at once woken by the request already served
        time.sleep(2)  # long enough for a retry at once to show; the next retry is an hour away
        assert (len(kube.listed), len(kube.watched_from)) == (1, 1)
    finally:
        informer.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_relist_diffs_objects_of_every_namespace_it_knows() -> None:
    def in_ns(obj: JSONObject, namespace: str) -> JSONObject:
        meta = dict(obj["metadata"])  # type: ignore[call-overload]
        meta["namespace"] = namespace
        return {**obj, "metadata": meta}

    h = harness(
        [
            listing(run_json("a", "1"), in_ns(run_json("a", "2"), "other"), in_ns(run_json("b", "3"), "other"), rv="5"),
            listing(in_ns(run_json("a", "2"), "other"), in_ns(run_json("c", "8"), "third"), rv="9"),
        ],
        [[error("gone", 410)]],
    )
    h.run()
    assert sorted((ev.type, ev.obj.namespace, ev.obj.name) for _, _, ev in h.seen[3:]) == [
        ("ADDED", "third", "c"),
        ("DELETED", "ns", "a"),
        ("DELETED", "other", "b"),
    ]
    assert sorted(str(run.key) for run in h.state.get().runs()) == ["other/a", "third/c"]


def test_slim_run_interns_the_strings_runs_share() -> None:
    from kruntimes.effects.informer import slim_run

    def settled(name: str) -> dict[str, object]:
        pod_uid = "".join(["uid-", "pod-1"])  # a fresh string each time, as json.loads gives
        status = {"phase": "Running", "assignedPod": "p1", "assignedPodUID": pod_uid, "message": "m"}
        return {"metadata": {"name": name, "namespace": NS}, "status": status}

    first, second = slim_run(settled("a")), slim_run(settled("b"))
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["status"] == {"phase": "Running", "assignedPod": "p1", "assignedPodUID": "uid-pod-1"}
    assert first["status"]["assignedPodUID"] is second["status"]["assignedPodUID"]


def _informer_logs(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "kruntimes.effects.informer"]


def test_a_watch_cut_short_by_a_requested_relist_is_logged_once_at_debug_not_as_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    informer_box: list[Informer] = []

    def on_event(old: ClusterState, new: ClusterState, ev: Event) -> None:
        if ev.obj.name == "b":  # the relist request interrupts the stream: it ends mid-read
            informer_box[0].request_relist()

    incomplete = KubeError(ApiError("transport", 0, "", "IncompleteRead(0 bytes read)"))
    h = harness(
        [listing(run_json("a", "1"), rv="5"), listing(run_json("a", "1"), run_json("b", "6"), rv="9")],
        [[event("ADDED", run_json("b", "6")), incomplete], [bookmark("9")]],
        on_event=on_event,
    )
    informer_box.append(h.informer)
    with caplog.at_level(logging.DEBUG, logger="kruntimes.effects.informer"):
        h.run()
    assert len(h.kube.listed) == 2, "the interrupted watch was followed by the requested list"
    assert _informer_logs(caplog) == [(logging.DEBUG, "watch interrupted for a requested relist")]


def test_a_watch_that_fails_on_its_own_is_still_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    incomplete = KubeError(ApiError("transport", 0, "", "IncompleteRead(0 bytes read)"))
    h = harness([listing(run_json("a", "1"), rv="5")], [[event("ADDED", run_json("b", "6")), incomplete]])
    with caplog.at_level(logging.DEBUG, logger="kruntimes.effects.informer"):
        h.run()
    logged = _informer_logs(caplog)
    assert (logging.WARNING, "watch failed") in logged
    (failed,) = [r for r in caplog.records if r.getMessage() == "watch failed"]
    assert extra_fields(failed) == {
        "resource": "runs", "error": "transport (no response): IncompleteRead(0 bytes read)", "kind": "transport"
    }
    assert not any("requested relist" in message for _, message in logged)


# --- one query for the namespaces a sharded replica holds (NamespaceScope) ---


def in_namespace(obj: JSONObject, namespace: str) -> JSONObject:
    meta = dict(obj["metadata"])  # type: ignore[call-overload]
    meta["namespace"] = namespace
    return {**obj, "metadata": meta}


def scope_keeping(known: set[str], kept: Sequence[str]) -> NamespaceScope:
    scope = NamespaceScope()
    scope.know(frozenset(known))
    for namespace in kept:
        scope.keep(namespace)
    return scope


def test_the_api_server_is_asked_to_leave_out_every_namespace_known_and_not_kept() -> None:
    scope = scope_keeping({"a", "b", "c", "d"}, ["a", "c"])
    assert watched_runs(scope=scope).params == {"fieldSelector": "metadata.namespace!=b,metadata.namespace!=d"}
    assert watched_pods(scope=scope).params == {"labelSelector": "runtime", "fieldSelector": "metadata.namespace!=b,metadata.namespace!=d"}
    assert scope.drop("c") and scope.left_out() == {"b", "c", "d"}
    assert not scope.drop("c"), "dropping what is not kept changes nothing"
    assert scope.know(frozenset({"a", "b"})), "d is gone, c left out: the query changes"
    assert not scope.know(frozenset({"a", "b"}))
    scope.keep("e")  # not known (created since the last namespace list): nothing to leave out
    assert watched_runs(scope=scope).params == {"fieldSelector": "metadata.namespace!=b"}
    assert watched_runs(scope=scope_keeping({"a"}, ["a"])).params == {}, "nothing left out: no field selector"


def test_a_query_that_would_leave_out_too_many_namespaces_leaves_out_none_and_the_informer_filters() -> None:
    many = {f"team-{i:04d}-with-a-long-name" for i in range(2000)}
    scope = scope_keeping(many | {"a"}, ["a"])
    assert watched_runs(scope=scope).params == {}, "about 90 KB of terms: none sent"
    small = scope_keeping({f"team-{i:04d}" for i in range(500)} | {"a"}, ["a"])
    assert len(watched_runs(scope=small).params["fieldSelector"]) <= MAX_FIELD_SELECTOR
    h = harness(
        [listing(in_namespace(run_json("x", "1"), "a"), in_namespace(run_json("y", "2"), "team-0001-with-a-long-name"), rv="3")],
        [],
        watched_runs(scope=scope),
    )
    h.run()
    assert [str(run.key) for run in h.state.get().runs()] == ["a/x"]


def test_objects_of_namespaces_not_kept_are_dropped_before_they_reach_the_state() -> None:
    scope = scope_keeping({"a", "b"}, ["a"])
    h = harness(
        # the server answered with more than asked (a namespace created since the query was made)
        [listing(in_namespace(run_json("x", "1"), "a"), in_namespace(run_json("y", "2"), "new"), rv="3")],
        [[event("ADDED", in_namespace(run_json("z", "4"), "b")), event("ADDED", in_namespace(run_json("v", "5"), "a"))]],
        watched_runs(scope=scope),
    )
    h.run()
    assert h.kube.listed[0] == ("/apis/kruntimes.io/v1alpha1/runs", {"fieldSelector": "metadata.namespace!=b"})
    assert h.kube.watch_params[0] == {"fieldSelector": "metadata.namespace!=b"}
    assert sorted(str(run.key) for run in h.state.get().runs()) == ["a/v", "a/x"]
    assert h.informer.malformed == 0, "left out is not malformed"
    assert h.kube.watched_from[1] == "5", "an event dropped still moves the version on"


def test_a_namespace_kept_later_is_listed_only_by_a_list_that_started_after_it() -> None:
    scope = scope_keeping({"a", "b"}, ["a"])
    box: list[Informer] = []
    kept: list[int] = []
    listed_before: list[bool] = []

    def on_event(old: ClusterState, new: ClusterState, ev: Event) -> None:
        if ev.obj.name == "v" and not kept:  # the round takes b: keep it, then list again
            scope.keep("b")
            kept.append(scope.kept_at("b") or 0)
            listed_before.append(box[0].listed(kept[0]))
            box[0].request_relist()

    h = harness(
        [
            listing(in_namespace(run_json("x", "1"), "a"), rv="3"),
            listing(in_namespace(run_json("x", "1"), "a"), in_namespace(run_json("v", "4"), "a"),
                    in_namespace(run_json("w", "2"), "b"), rv="6"),
        ],
        [[event("ADDED", in_namespace(run_json("v", "4"), "a"))], []],
        watched_runs(scope=scope),
        on_event=on_event,
    )
    box.append(h.informer)
    h.run()
    assert listed_before == [False], "the list before b was kept does not hold b"
    assert kept and h.informer.listed(kept[0])
    assert h.kube.listed[1][1] == {}, "the second list no longer leaves b out"
    assert sorted(str(run.key) for run in h.state.get().runs()) == ["a/v", "a/x", "b/w"]


def test_a_namespace_dropped_is_forgotten_and_its_later_events_are_not_applied() -> None:
    scope = scope_keeping({"a", "b"}, ["a", "b"])
    box: list[Informer] = []
    forgotten: list[int] = []
    applied: list[tuple[str, str]] = []

    def on_event(old: ClusterState, new: ClusterState, ev: Event) -> None:
        applied.append((ev.type, ev.obj.name))
        if ev.obj.name == "trigger" and not forgotten:  # the round lets b go
            scope.drop("b")
            forgotten.append(box[0].drop_namespace("b"))

    h = harness(
        [listing(in_namespace(run_json("x", "1"), "a"), in_namespace(run_json("y", "2"), "b"), rv="3")],
        [[
            event("ADDED", in_namespace(run_json("trigger", "4"), "a")),
            event("MODIFIED", in_namespace(run_json("y", "5"), "b")),  # sent before the server heard
            event("ADDED", in_namespace(run_json("z", "6"), "b")),
        ]],
        watched_runs(scope=scope),
        on_event=on_event,
    )
    box.append(h.informer)
    h.run()
    assert forgotten == [1]
    assert sorted(str(run.key) for run in h.state.get().runs()) == ["a/trigger", "a/x"]
    assert applied == [("ADDED", "x"), ("ADDED", "y"), ("ADDED", "trigger"), ("DELETED", "y")]


def test_forgetting_a_namespace_from_another_thread_leaves_none_of_it_behind() -> None:
    """The round lets a namespace go while the informer applies a stream of its events."""
    scope = scope_keeping({"a", "b"}, ["a", "b"])
    stream: list[WatchEvent | KubeError] = [event("ADDED", in_namespace(run_json(f"r{i}", str(10 + i)), "b")) for i in range(3000)]
    clock = FakeClock()
    kube = FakeKube([listing(in_namespace(run_json("x", "1"), "a"), rv="3")], [stream], FakeSleeper(clock))
    state = Atom(EMPTY_STATE)
    informer = Informer(kube, watched_runs(scope=scope), state, clock=clock)
    kube.informer = informer
    thread = informer.start()
    try:
        assert wait_until(lambda: sum(1 for run in state.get().runs() if run.namespace == "b") >= 100, timeout=10)
        scope.drop("b")
        informer.drop_namespace("b")
        assert not [run for run in state.get().runs() if run.namespace == "b"]
    finally:
        thread.join(timeout=10)
    assert not [run for run in state.get().runs() if run.namespace == "b"], "an event decoded before the drop came back"
    assert [str(run.key) for run in state.get().runs()] == ["a/x"]


class HeldStream:
    """A watch that yields its events, then stays open and quiet until interrupted (as a real one
    does); one nobody interrupts fails after ``patience`` seconds."""

    def __init__(self, events: Sequence[WatchEvent], patience: float = 5.0) -> None:
        self._events = list(events)
        self._interrupted = threading.Event()
        self._patience = patience

    def __iter__(self) -> HeldStream:
        return self

    def __next__(self) -> WatchEvent:
        if self._events:
            return self._events.pop(0)
        if self._interrupted.wait(self._patience):
            raise StopIteration
        raise error("transport", 0)

    def interrupt(self) -> None:
        self._interrupted.set()


@dataclass
class HeldWatches(FakeKube):
    """Each watch script is served as a :class:`HeldStream`."""

    def _stream(self, resource_version: str, params: Mapping[str, str] | None) -> Iterator[WatchEvent]:
        script = self._next_watch(resource_version, params)
        return iter(()) if script is None else HeldStream([item for item in script if not isinstance(item, KubeError)])


def test_rewatch_opens_the_watch_again_from_the_version_seen_with_the_new_query_and_lists_nothing() -> None:
    scope = scope_keeping({"a", "b"}, ["a", "b"])
    clock = FakeClock()
    sleeper = FakeSleeper(clock)
    kube = HeldWatches(
        [listing(in_namespace(run_json("x", "1"), "a"), rv="3")],
        [[event("ADDED", in_namespace(run_json("v", "4"), "a"))], [event("ADDED", in_namespace(run_json("w", "7"), "a"))]],
        sleeper,
    )
    state = Atom(EMPTY_STATE)

    def on_event(old: ClusterState, new: ClusterState, ev: Event) -> None:
        if ev.obj.name == "v" and scope.drop("b"):  # the round lets b go; the open watch still sends b
            informer.drop_namespace("b")
            informer.rewatch()
        if ev.obj.name == "w":
            informer.stop()

    informer = Informer(kube, watched_runs(scope=scope), state, on_event, clock=clock, sleep=sleeper)
    kube.informer = informer
    informer.run()
    assert kube.watch_params == [{}, {"fieldSelector": "metadata.namespace!=b"}]
    assert kube.watched_from == ["3", "4"]
    assert len(kube.listed) == 1, "a narrower query needs no list"
    assert sleeper.sleeps == [], "a watch ended on purpose is no failure: no back-off"
    assert sorted(str(run.key) for run in state.get().runs()) == ["a/v", "a/w", "a/x"]


def test_a_relist_decodes_only_the_objects_whose_version_changed() -> None:
    """A new leader's fresh read, a 410 relist and a sharded take list everything again: what the
    informer already applied at the same resourceVersion is taken as it is, not decoded again."""
    decoded: list[str] = []

    def counting(raw: object) -> Result[Object, DecodeError]:
        decoded.append(str(raw["metadata"]["name"]))  # type: ignore[index]
        return decode_run(raw)

    watched = Watched("runs", RUNS, counting, transform=slim_run)
    h = harness(
        [listing(run_json("a", "1"), run_json("b", "2"), rv="3"), listing(run_json("a", "1"), run_json("b", "5"), run_json("c", "6"), rv="7")],
        [[error("gone", 410)]],
        watched,
    )
    h.run()
    assert decoded == ["a", "b", "b", "c"]
    assert sorted((run.name, run.resource_version) for run in h.state.get().runs()) == [("a", "1"), ("b", "5"), ("c", "6")]
    assert kinds(h)[2:] == [("MODIFIED", "b"), ("ADDED", "c")]


def test_the_listed_hook_runs_after_every_list_the_synced_hook_after_the_first_only() -> None:
    calls: list[str] = []
    clock = FakeClock()
    sleeper = FakeSleeper(clock)
    kube = FakeKube([listing(run_json("a", "1"), rv="2"), listing(run_json("a", "3"), rv="4")], [[error("gone", 410)]], sleeper)
    informer = Informer(kube, watched_runs(), Atom(EMPTY_STATE), clock=clock, sleep=sleeper,
                        on_synced=lambda: calls.append("synced"), on_listed=lambda: calls.append("listed"))
    kube.informer = informer
    informer.run()
    assert calls == ["synced", "listed", "listed"]


# --- a server that lost its state ---


TOO_LARGE: JSONObject = {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": "Timeout: Too large resource version: 1210, current: 212", "reason": "Timeout",
    "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1},
    "code": 504,
}
"""kube-apiserver v1.37's answer to a read from a resourceVersion it has not reached, verbatim."""


def too_large() -> KubeError:
    return KubeError(error_from_status(504, TOO_LARGE, "1"))


def phase(h: Harness, name: str) -> str | None:
    run = h.state.get().run(RunKey(NS, name))
    return None if run is None else run.status.phase


def test_a_watch_answered_too_large_resource_version_relists_and_trusts_no_object_it_knew() -> None:
    # the new server issued resourceVersion 1 again, to another write of "a": same version, other content
    h = harness(
        [
            listing(run_json("a", "1"), run_json("b", "2"), rv="10"),
            listing(run_json("a", "1", phase="Scheduled"), run_json("c", "2"), rv="3"),
        ],
        [[too_large()], [bookmark("3")]],
    )
    h.run()
    assert phase(h, "a") == "Scheduled", "the object at a version seen before was taken from the new list"
    assert sorted(run.name for run in h.state.get().runs()) == ["a", "c"]
    assert sorted(kinds(h)[2:]) == [("ADDED", "c"), ("DELETED", "b"), ("MODIFIED", "a")]
    assert h.kube.watched_from[:2] == ["10", "3"], "watched on from the new server's version"
    assert h.sleeper.sleeps == [0.8], "the relist waits for no back-off (the only sleep ends the script)"
    assert h.informer.losses == 1


def test_the_informer_tells_on_lost_how_the_server_showed_it_lost_its_state() -> None:
    lost: list[str] = []
    clock = FakeClock()
    sleeper = FakeSleeper(clock)
    kube = FakeKube(
        [listing(rv="10"), listing(rv="3"), listing(rv="2"), listing(rv="2")],
        [[too_large()], [bookmark("1")], [bookmark("2")]],
        sleeper,
    )
    informer = Informer(kube, watched_runs(), Atom(EMPTY_STATE), clock=clock, sleep=sleeper, on_lost=lost.append)
    kube.informer = informer
    informer.run()
    assert lost == ["too_large_resource_version", "resource_version_went_back"]


def test_a_too_large_resource_version_in_an_error_event_is_recognised_from_the_servers_status() -> None:
    with pytest.raises(KubeError) as raised:
        list(parse_watch_stream([json.dumps({"type": "ERROR", "object": TOO_LARGE}).encode() + b"\n"]))
    assert raised.value.error.too_large_resource_version
    assert not ApiError("timeout", 504, "Timeout", "Timeout: request did not complete within 60s").too_large_resource_version


def test_a_bookmark_older_than_the_newest_version_seen_relists_and_trusts_no_object_it_knew() -> None:
    h = harness(
        [listing(run_json("a", "5"), rv="10"), listing(run_json("a", "5", phase="Running"), rv="4")],
        [[bookmark("3")], [bookmark("4")]],
    )
    h.run()
    assert phase(h, "a") == "Running"
    assert h.kube.watched_from[:2] == ["10", "4"]


def test_an_event_older_than_the_newest_version_seen_is_not_applied() -> None:
    h = harness(
        [listing(run_json("a", "5"), rv="10"), listing(run_json("b", "2"), rv="4")],
        [[event("ADDED", run_json("ghost", "3"))], [bookmark("4")]],
    )
    h.run()
    assert ("ADDED", "ghost") not in kinds(h)
    assert sorted(run.name for run in h.state.get().runs()) == ["b"]


def test_a_list_older_than_the_newest_version_seen_is_not_applied_and_the_next_list_trusts_nothing() -> None:
    stale_view = listing(run_json("a", "5", phase="Scheduled"), rv="4")
    h = harness(
        [listing(run_json("a", "5"), rv="10"), stale_view, listing(run_json("a", "5", phase="Scheduled"), rv="4")],
        [[error("gone", 410)], [bookmark("4")]],
    )
    h.run()
    assert phase(h, "a") == "Scheduled", "a known version was not taken for the same object"
    assert len(h.kube.listed) >= 3, "the list that went back was followed by another"
    assert h.kube.watched_from[:2] == ["10", "4"]


def test_a_watch_that_ends_without_an_event_or_a_bookmark_is_followed_by_a_read_that_shows_the_server_went_back() -> None:
    # kube-apiserver holds a watch from a version it has not reached open and sends nothing; the
    # informer then reads the collection's current version (the fake serves it as a whole list)
    h = harness(
        [listing(run_json("a", "5"), rv="10"), listing(rv="4"), listing(run_json("c", "3"), rv="4")],
        [[], [bookmark("4")]],
    )
    h.run()
    assert sorted(run.name for run in h.state.get().runs()) == ["c"]
    assert h.kube.watched_from[:2] == ["10", "4"]


def test_a_quiet_watch_on_a_server_that_kept_its_state_is_watched_again_from_where_it_was() -> None:
    # a resource nobody writes: kube-apiserver sends such a watch no bookmark either
    h = harness(
        [listing(run_json("a", "5"), rv="10"), listing(run_json("b", "12"), rv="12")],
        [[], [bookmark("13")]],
    )
    h.run()
    assert kinds(h) == [("ADDED", "a")], "the read of the current version applies nothing"
    assert h.kube.watched_from[:2] == ["10", "10"]
    assert h.informer.relists == 0
    assert h.informer.losses == 0


def test_a_watch_that_finds_the_server_unreachable_lists_before_watching_again() -> None:
    # a server back from a restart may not hold what the informer knows: a list shows it
    h = harness(
        [listing(run_json("a", "5"), rv="10"), listing(run_json("b", "12"), rv="12")],
        [[error("unreachable", 0)], [bookmark("13")]],
    )
    h.run()
    assert sorted(run.name for run in h.state.get().runs()) == ["b"]
    assert h.kube.watched_from[:2] == ["10", "12"]
    assert h.sleeper.sleeps[0] == 0.8, "backing off first, as after any failure"


def test_a_watch_refused_while_the_server_restarts_is_followed_by_a_read_that_shows_it_went_back() -> None:
    # a server back from an etcd restore first refuses (its RBAC caches are still filling), then
    # holds a watch from the old version open in silence: the read before watching again shows it
    h = harness(
        [listing(run_json("a", "5"), rv="10"), listing(rv="4"), listing(run_json("c", "3"), rv="4")],
        [[error("forbidden", 403)], [bookmark("5")]],
    )
    h.run()
    assert sorted(run.name for run in h.state.get().runs()) == ["c"]
    assert h.informer.losses == 1
    assert h.kube.watched_from[:2] == ["10", "4"]


def test_a_watch_that_broke_on_a_server_that_kept_its_state_is_resumed_from_where_it_was() -> None:
    h = harness(
        [listing(run_json("a", "5"), rv="10"), listing(run_json("b", "12"), rv="12")],
        [[error("transport", 0)], [bookmark("13")]],
    )
    h.run()
    assert kinds(h) == [("ADDED", "a")]
    assert h.kube.watched_from[:2] == ["10", "10"]
    assert h.informer.losses == 0


def test_resource_versions_that_are_not_decimal_numbers_are_never_compared() -> None:
    huge = "9" * 5000  # past Python's int conversion limit: never converted
    h = harness(
        [listing(run_json("a", "x7"), rv="x9"), listing(run_json("a", "x7"), rv="x1")],
        [[bookmark(huge), event("ADDED", run_json("b", "x8")), bookmark("x1")], [error("gone", 410)], [bookmark("3")]],
    )
    h.run()
    assert sorted(run.name for run in h.state.get().runs()) == ["a"]
    assert h.informer.losses == 0
