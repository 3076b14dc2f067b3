"""The controller's small parts, without a server: logs, the event recorder, flags, options, wakeup routing."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import cast

import pytest
from returns.result import Failure, Result, Success

from kruntimes.cli import main as cli_main
from kruntimes.effects.events import RunEvents
from kruntimes.kubeclient.events import EventSettings
from kruntimes.kubeclient.tokenbucket import TokenBucket
from kruntimes.kubeclient.kube import MERGE_PATCH, ApiError, JSONObject
from kruntimes.effects.logs import JsonFormatter, TextFormatter, configure, resolve_format
from kruntimes.effects.runner import SchedulerOptions, parse_bind_address, workspace_wakeups
from kruntimes.pure.state.cluster import Event, apply, from_objects
from kruntimes.pure.readers.kube import decode_run, decode_workspace
from kruntimes.pure.model.objects import Run, RunKey, Workspace

NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def _record(**extra: object) -> logging.LogRecord:
    record = logging.LogRecord("kruntimes.x", logging.INFO, __file__, 1, "bound run", None, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_json_logs_are_one_object_per_line_with_the_extra_fields() -> None:
    line = JsonFormatter().format(_record(run=RunKey("ns", "r"), pod="p-0"))
    body = json.loads(line)
    assert (body["level"], body["logger"], body["msg"], body["run"], body["pod"]) == (
        "info",
        "kruntimes.x",
        "bound run",
        "ns/r",
        "p-0",
    )
    assert body["time"].endswith("Z")


def test_text_logs_read_as_a_sentence_with_key_values() -> None:
    line = TextFormatter().format(_record(run="ns/r", wait_message="two words"))
    assert line.endswith('INFO  kruntimes.x: bound run run=ns/r wait_message="two words"')


def test_auto_format_is_json_unless_the_stream_is_a_terminal() -> None:
    assert resolve_format("auto", io.StringIO()) == "json"
    assert resolve_format("text", io.StringIO()) == "text"


def test_logs_follow_stderr_when_it_is_replaced_after_logging_was_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    handler = configure("json", "info")
    try:
        first.close()  # a caller's stream that is gone by the time a late thread logs
        monkeypatch.setattr("sys.stderr", second)
        logging.getLogger("kruntimes.x").info("caches synced")
    finally:
        logging.getLogger().removeHandler(handler)
    assert json.loads(second.getvalue())["msg"] == "caches synced"


@dataclass
class FakeEvents:
    created: list[Mapping[str, object]] = field(default_factory=list)
    patched: list[tuple[str, str]] = field(default_factory=list)
    expire_next_patch: bool = False

    def create(self, path: str, body: Mapping[str, object], *, read: bool = True) -> Result[JSONObject, ApiError]:
        self.created.append(body)
        return Success(dict(body))

    def patch(
        self, path: str, body: str | bytes, content_type: str = MERGE_PATCH, *, read: bool = True
    ) -> Result[JSONObject, ApiError]:
        if self.expire_next_patch:
            self.expire_next_patch = False
            return Failure(ApiError("not_found", 404, "NotFound", "gone"))
        self.patched.append((path, body if isinstance(body, str) else body.decode()))
        return Success({})


def _run(name: str = "r") -> Run:
    return decode_run(
        {
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "Run",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"runtime": "py", "workspace": {"name": "ws"}},
        }
    ).unwrap()


def test_a_waiting_run_gets_one_failed_scheduling_event_until_its_message_changes_or_time_passes() -> None:
    clock = [0.0]
    kube = FakeEvents()
    recorder = RunEvents(kube, EventSettings(instance="me", repeat_interval=300), clock=lambda: clock[0])
    run = _run()
    recorder.start()
    try:
        assert recorder.failed_scheduling(run, "waiting A")
        assert not recorder.failed_scheduling(run, "waiting A")
        assert recorder.failed_scheduling(run, "waiting B")
        clock[0] = 301.0
        assert recorder.failed_scheduling(run, "waiting B")
        assert recorder.flush(5)
    finally:
        recorder.stop()
    assert [c["message"] for c in kube.created] == ["waiting A", "waiting B"]
    assert [c["reason"] for c in kube.created] == ["FailedScheduling"] * 2
    assert kube.created[0]["involvedObject"] == {
        "apiVersion": "kruntimes.io/v1alpha1",
        "kind": "Run",
        "namespace": "ns",
        "name": "r",
        "uid": "uid-r",
        "resourceVersion": "1",
    }
    [(path, body)] = kube.patched  # the repeat of "waiting B" bumps the count of its Event
    assert json.loads(body)["count"] == 2 and path.startswith("/api/v1/namespaces/ns/events/r.")


class SimulatedTime:
    """A clock that only moves when slept on (or by hand), and the sleeps asked of it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_token_bucket_spends_its_burst_then_paces_at_its_rate() -> None:
    time_ = SimulatedTime()
    slept = time_.slept
    bucket = TokenBucket(2.0, 3, clock=time_.clock, sleep=time_.sleep)
    for _ in range(3):
        bucket.take()
    assert slept == [] and time_.now == 0.0
    bucket.take()
    bucket.take()
    assert slept == [0.5, 0.5] and time_.now == 1.0
    time_.now += 10.0  # idle time refills at most the burst
    for _ in range(3):
        bucket.take()
    assert len(slept) == 2
    bucket.take()
    assert slept[-1] == 0.5
    unlimited = TokenBucket(0.0, 1, clock=time_.clock, sleep=time_.sleep)
    for _ in range(100):
        unlimited.take()
    assert len(slept) == 3


def test_a_writer_the_rate_holds_back_wakes_once_per_few_writes_at_the_same_rate() -> None:
    time_ = SimulatedTime()
    slept = time_.slept
    bucket = TokenBucket(50.0, 100, clock=time_.clock, sleep=time_.sleep)
    for _ in range(100):  # the burst
        bucket.take()
    assert slept == []
    for _ in range(500):  # ten seconds' worth at 50 a second
        bucket.take()
    assert len(slept) == 100  # one wake per five writes, not one per write
    assert time_.now == pytest.approx(10.0)  # and no faster than the rate
    slow = TokenBucket(2.0, 3, clock=time_.clock, sleep=time_.sleep)
    for _ in range(4):  # under one token per WAKE_BATCH: still one wake per write
        slow.take()
    assert slept[-1] == pytest.approx(0.5)


def test_the_token_bucket_spends_only_its_share_of_the_burst_and_the_rate() -> None:
    time_ = SimulatedTime()
    slept = time_.slept
    share = [0.25]
    bucket = TokenBucket(8.0, 8, clock=time_.clock, sleep=time_.sleep, share=lambda: share[0])
    bucket.take()
    bucket.take()  # a quarter of a burst of 8
    assert slept == []
    bucket.take()
    assert slept == [0.5]  # a quarter of 8 a second
    share[0] = 1.0  # the other members left: the whole budget again
    time_.now += 10.0
    for _ in range(8):
        bucket.take()
    assert slept == [0.5]
    share[0] = 0.0  # never stalls outright
    bucket.take()
    assert 0 < slept[-1] < float("inf")


def test_a_burst_of_binds_beyond_the_event_rate_drops_the_surplus_events() -> None:
    time_ = SimulatedTime()
    kube = FakeEvents()
    settings = EventSettings(queue_size=5, qps=1.0, burst=2)
    recorder = RunEvents(kube, settings, clock=time_.clock, sleep=time_.sleep)
    for i in range(20):  # the writer is not running yet: the queue holds 5, the rest are dropped
        recorder.scheduled(_run(f"r{i}"), "pod-0")
    assert recorder.dropped == 15
    recorder.start()
    try:
        assert recorder.flush(100)
    finally:
        recorder.stop()
    assert [cast(Mapping[str, object], c["involvedObject"])["name"] for c in kube.created] == [f"r{i}" for i in range(5)]
    assert time_.now == 3.0, "2 at once, then one a second"


def test_a_repeat_of_an_expired_event_creates_a_new_one() -> None:
    clock = [0.0]
    kube = FakeEvents(expire_next_patch=True)
    recorder = RunEvents(kube, EventSettings(repeat_interval=1), clock=lambda: clock[0])
    recorder.start()
    try:
        recorder.failed_scheduling(_run(), "m")
        assert recorder.flush(5)
        clock[0] = 2.0
        recorder.failed_scheduling(_run(), "m")
        assert recorder.flush(5)
    finally:
        recorder.stop()
    assert len(kube.created) == 2 and kube.patched == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9", ("::1", 9)), ("0", None)],
)
def test_bind_addresses_parse_like_controller_runtime(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_bind_address(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:http", ":70000"])
def test_bad_bind_addresses_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bind_address(text)


@pytest.mark.parametrize(
    "argv",
    [
        ["--workers", "0"],
        ["--heartbeat-stale-after", "soon"],
        ["--metrics-bind-address", "8080"],
        ["--log-format", "xml"],
        ["--event-qps", "-1"],
        ["--event-qps", "nan"],
        ["--event-burst", "0"],
        ["--leader-elect-resource-namespace", "ns", "--leader-elect-lease-duration", "5s", "--leader-elect-renew-deadline", "10s"],
        ["--leader-elect=false", "--kubeconfig", "/nonexistent/kubeconfig"],
    ],
)
def test_bad_flags_exit_2_with_a_message_and_no_traceback(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = cli_main(["scheduler", *argv])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert "kruntimes scheduler: " in err and "Traceback" not in err


def test_event_rate_flags_reach_the_options() -> None:
    import argparse

    from kruntimes.commands import scheduler as command

    parser = argparse.ArgumentParser()
    command.configure(parser)
    options = command.options_from(parser.parse_args(["--leader-elect=false", "--event-qps", "0", "--event-burst", "5"]))
    assert (options.event_qps, options.event_burst) == (0.0, 5)
    defaults = command.options_from(parser.parse_args(["--leader-elect=false"]))
    assert (defaults.event_qps, defaults.event_burst) == (50.0, 100)


def test_options_name_every_problem() -> None:
    problems = replace(SchedulerOptions(), workers=0, cycle_log_backups=-1).problems()
    assert any("--workers" in p for p in problems) and any("backups" in p for p in problems)


def _workspace(phase: str, pod: str = "") -> Workspace:
    return decode_workspace(
        {
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "PersistentWorkspace",
            "metadata": {"name": "ws", "namespace": "ns", "uid": "w", "resourceVersion": "2"},
            "spec": {"runtime": "py", "mode": "RuntimePodLocal"},
            "status": {"phase": phase, "boundPod": pod},
        }
    ).unwrap()


def test_a_workspace_becoming_bound_wakes_the_pending_runs_that_reference_it() -> None:
    referencing = _run("uses-ws")
    other = replace(_run("other"), workspace=None)
    other_runtime = replace(_run("uses-ws-from-node"), runtime="node")  # waits on the mismatch
    old = from_objects([referencing, other, other_runtime, _workspace("Lost")])
    event = Event("MODIFIED", _workspace("Bound", "p-1"))
    new = apply(old, event)
    assert workspace_wakeups(old, new, event) == (RunKey("ns", "uses-ws"), RunKey("ns", "uses-ws-from-node"))
    same = Event("MODIFIED", _workspace("Bound", "p-1"))
    assert workspace_wakeups(new, apply(new, same), same) == ()
