"""`kruntimes scheduler` at start-up: what it cannot use (a kubeconfig, an address) is one line on
stderr and exit 2, as ``--help`` promises; what it will run with is one log line before anything else.

The process is started for real; none of these cases reaches an API server.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kruntimes.effects.metrics import package_version

KRUNTIMES = Path(sys.executable).with_name("kruntimes")
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
users: [{name: u, user: {token: t}}]
"""


def scheduler(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KRUNTIMES), "scheduler", "--leader-elect=false", "--log-format", "json", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


def complaint(done: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line that is not a JSON log line, which must be all there is to read."""
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if not line.startswith("{")]
    return line


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        yield taken.getsockname()[1]


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("apiVersion: v1\nclusters: [ {\n", "ParserError: while parsing a flow node"),
        ("just a string\n", "TypeError: 'str' object does not support item assignment"),
        ("clusters: 5\n", "TypeError: 'int' object is not iterable"),
    ],
    ids=["not YAML", "a string", "a list that is a number"],
)
def test_a_kubeconfig_that_cannot_be_loaded_is_one_line_and_exit_2(tmp_path: Path, text: str, detail: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    done = scheduler("--kubeconfig", str(path))
    assert done.returncode == 2
    line = complaint(done)
    assert line.startswith(f"kruntimes scheduler: cannot load cluster configuration from {path}: {detail}"), line


@pytest.mark.parametrize("flag", ["--metrics-bind-address", "--health-probe-bind-address"])
def test_a_busy_address_is_named_in_one_line_and_exit_2(kubeconfig: Path, busy_port: int, flag: str) -> None:
    other = "--health-probe-bind-address" if flag == "--metrics-bind-address" else "--metrics-bind-address"
    done = scheduler("--kubeconfig", str(kubeconfig), flag, f"127.0.0.1:{busy_port}", other, "127.0.0.1:0")
    assert done.returncode == 2
    assert complaint(done) == f"kruntimes scheduler: cannot listen on {flag} 127.0.0.1:{busy_port}: Address already in use"


def test_an_address_that_is_not_this_hosts_is_named_in_one_line_and_exit_2(kubeconfig: Path) -> None:
    done = scheduler("--kubeconfig", str(kubeconfig), "--metrics-bind-address", "192.0.2.1:8080", "--health-probe-bind-address", "0")
    assert done.returncode == 2
    assert complaint(done) == "kruntimes scheduler: cannot listen on --metrics-bind-address 192.0.2.1:8080: Cannot assign requested address"


def test_the_first_log_line_names_the_version_and_every_setting_in_force(kubeconfig: Path, busy_port: int) -> None:
    """Before it listens (here it cannot), the scheduler says what it runs: flags and their defaults."""
    done = scheduler(
        "--kubeconfig", str(kubeconfig), "--metrics-bind-address", f"127.0.0.1:{busy_port}", "--workers", "7",
        "--kube-api-qps", "20", "--namespace", "team-a",
    )
    assert done.returncode == 2
    first = json.loads(done.stderr.splitlines()[0])
    assert (first["level"], first["msg"]) == ("info", "starting")
    assert first["version"] == package_version() and first["python"] == ".".join(map(str, sys.version_info[:3]))
    assert first["server"] == "https://127.0.0.1:9"
    config = first["config"]
    assert config["workers"] == 7 and config["namespaces"] == ["team-a"]
    assert (config["kube-api-qps"], config["kube-api-burst"]) == (20.0, 2000)
    assert (config["queue-order"], config["heartbeat-stale-after"], config["leader-elect"]) == ("fifo", "15s", False)
    assert config["metrics-bind-address"] == f"127.0.0.1:{busy_port}"
    assert config["filters"] == ["RuntimePodAvailability", "RunAffinity", "WorkspacePlacement"]
    assert config["scores"] == {"PreferredRunAffinity": 1, "LeastLoaded": 1}
