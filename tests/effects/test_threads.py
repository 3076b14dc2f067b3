"""Threads named for the operating system: what ``top -H`` and ``ps -L`` show an operator."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from kruntimes.kubeclient.threads import OS_NAME_BYTES, SKIPPABLE, Supervisor, named_thread

HAS_PROC = Path("/proc/thread-self/comm").exists()


def os_name_of(thread: threading.Thread) -> str:
    return Path(f"/proc/self/task/{thread.native_id}/comm").read_text().strip()


@pytest.mark.skipif(not HAS_PROC, reason="no /proc/thread-self on this OS")
def test_a_named_thread_carries_its_name_in_the_kernel_cut_to_what_the_kernel_keeps() -> None:
    seen: dict[str, str] = {}
    running = threading.Event()
    release = threading.Event()

    def body() -> None:
        seen["python"] = threading.current_thread().name
        running.set()
        release.wait(10)

    short = named_thread(body, "worker-1-0")
    short.start()
    assert running.wait(10)
    assert os_name_of(short) == "worker-1-0" and seen["python"] == "worker-1-0" and short.daemon
    release.set()
    short.join(10)

    running.clear()
    release.clear()
    long = named_thread(body, "informer-workspaces")
    long.start()
    assert running.wait(10)
    assert os_name_of(long) == "informer-workspaces"[:OS_NAME_BYTES] == "informer-worksp"
    assert seen["python"] == "informer-workspaces", "Python keeps the whole name"
    release.set()
    long.join(10)


@pytest.mark.skipif(not HAS_PROC, reason="no /proc/thread-self on this OS")
def test_a_plain_thread_keeps_the_processs_name_so_the_difference_is_the_helpers() -> None:
    # the premise of kubeclient/threads.py: CPython before 3.14 leaves the kernel's name alone
    names: list[str] = []
    plain = threading.Thread(target=lambda: names.append(Path("/proc/thread-self/comm").read_text().strip()), name="worker-9-9")
    plain.start()
    plain.join(10)
    assert names and names[0] != "worker-9-9"


def test_the_target_runs_even_where_the_os_name_cannot_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import kruntimes.kubeclient.threads as threads

    def no_proc(*args: object, **kwargs: object) -> object:
        raise PermissionError("read-only /proc")

    monkeypatch.setattr(threads, "open", no_proc, raising=False)
    assert not threads.name_os_thread("control")
    done = threading.Event()
    thread = named_thread(done.set, "control")
    thread.start()
    thread.join(10)
    assert done.is_set()


def test_a_supervised_thread_that_raises_is_recorded_once_and_its_listeners_told_without_the_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    supervisor = Supervisor()
    heard: list[str] = []
    supervisor.on_failure(heard.append)

    tenant_text = "a label value of some tenant"

    def broken() -> None:
        raise KeyError(tenant_text)

    with caplog.at_level(logging.CRITICAL):
        first = supervisor.thread(broken, "control")
        first.start()
        first.join(10)
        second = supervisor.thread(broken, "event-recorder")
        second.start()
        second.join(10)
    assert supervisor.wait(0) and supervisor.failure == "control" and heard == ["control"]
    late: list[str] = []
    supervisor.on_failure(late.append)
    assert late == ["control"], "a listener added after the failure hears of it at once"
    errors = [str(getattr(record, "error", "")) for record in caplog.records]
    assert len(errors) == 2 and all(error.startswith("KeyError") and "broken" in error for error in errors)
    assert not any(tenant_text in str(record.__dict__) for record in caplog.records)


def test_a_supervised_thread_that_returns_is_no_failure() -> None:
    supervisor = Supervisor()
    thread = supervisor.thread(lambda: None, "standby")
    thread.start()
    thread.join(10)
    assert supervisor.failure is None and not supervisor.wait(0)
    assert set(supervisor.skips()) == set(SKIPPABLE) and not any(supervisor.skips().values())
