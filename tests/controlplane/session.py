"""One control plane per test session, shared by every pytest-xdist worker, gone when the session ends.

The controlling process (the only process without xdist) makes a private directory in
``pytest_configure`` and names it in ``KRUNTIMES_CONTROLPLANE_DIR``; workers inherit it. The first
test that asks for the control plane starts it under a file lock and writes ``state.json``; every
other worker attaches to what that file names. ``pytest_unconfigure`` in the controlling process
stops both servers, and a guard process stops them too should pytest itself be killed. The
directory (credentials, etcd's data, both servers' logs) is removed after a green session and kept,
with its path printed, after a failing one.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .server import BUILD_SCRIPT, Binaries, ControlPlane, build_binaries

ENV: Final = "KRUNTIMES_CONTROLPLANE_DIR"
_owned: ControlPlane | None = None
"""The control plane this process started, if any (stopped through its process handles)."""
STATE: Final = "state.json"


@dataclass(frozen=True, slots=True)
class _State:
    etcd_port: int
    etcd_peer_port: int
    apiserver_port: int
    admin_token: str
    kube_apiserver: str
    etcd: str
    pids: list[int]


def configure() -> None:
    """In the controlling process: the session's directory, inherited by the workers."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None and ENV not in os.environ:
        os.environ[ENV] = tempfile.mkdtemp(prefix="kruntimes-controlplane-")


def prebuild() -> None:
    """In the controlling process, before any test: build what the cache lacks, its progress on
    stderr, so a cold build (minutes) is never charged to the first test's timeout. Without Go and
    without cached binaries nothing happens here: a test that needs the server reports why."""
    if os.environ.get("PYTEST_XDIST_WORKER") is not None or shutil.which("go") is None:
        return
    subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.DEVNULL, check=False)


def unconfigure(failed: bool) -> None:
    """In the controlling process: stop the servers; keep the directory only if the session failed."""
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        return
    root = os.environ.get(ENV)
    if root is None:
        return
    state_file = Path(root) / STATE
    if state_file.exists():
        state = json.loads(state_file.read_text())
        if _owned is not None:
            _owned.stop()
        else:
            for pid in state["pids"]:
                _stop(int(pid))
    if failed and state_file.exists():
        sys.stderr.write(f"\nthe real control plane's logs and data are kept in {root}\n")
    else:
        shutil.rmtree(root, ignore_errors=True)


def _stop(pid: int) -> None:
    try:
        if os.waitpid(pid, os.WNOHANG) != (0, 0):  # our own child, already exited: reaped now
            return
    except ChildProcessError:
        pass  # started by a worker process: not ours to reap
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(150):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _guard(owner: int, pids: list[int]) -> None:
    """A detached watcher that stops the servers once ``owner`` (the controlling pytest) is gone."""
    script = f"while kill -0 {owner} 2>/dev/null; do sleep 1; done; kill {' '.join(map(str, pids))} 2>/dev/null"
    subprocess.Popen(
        ["sh", "-c", script], start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def shared() -> ControlPlane:
    """The session's control plane: started by the first caller, attached to by the rest."""
    configure()  # a run that bypassed pytest_configure (e.g. a plain import) still gets a directory
    root = Path(os.environ[ENV])
    with _locked(root / "lock"):
        state_file = root / STATE
        if state_file.exists():
            state = _State(**json.loads(state_file.read_text()))
            return ControlPlane(
                root / "server",
                Binaries(Path(state.kube_apiserver), Path(state.etcd)),
                etcd_port=state.etcd_port,
                etcd_peer_port=state.etcd_peer_port,
                apiserver_port=state.apiserver_port,
                admin_token=state.admin_token,
            )
        global _owned
        plane = _owned = ControlPlane(root / "server", build_binaries()).start()
        pids = plane.pids()
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        _guard(os.getppid() if worker is not None else os.getpid(), pids)
        state_file.write_text(
            json.dumps(
                {
                    "etcd_port": plane.etcd_port,
                    "etcd_peer_port": plane.etcd_peer_port,
                    "apiserver_port": plane.apiserver_port,
                    "admin_token": plane.admin_token,
                    "kube_apiserver": str(plane.binaries.kube_apiserver),
                    "etcd": str(plane.binaries.etcd),
                    "pids": pids,
                }
            )
        )
        return plane


def private(directory: Path) -> Iterator[ControlPlane]:
    """A control plane of the caller's own, for a test that restarts or restores it."""
    plane = ControlPlane(directory, build_binaries()).start()
    try:
        yield plane
    finally:
        plane.stop()
