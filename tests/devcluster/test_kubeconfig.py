"""The dev cluster's kubeconfig carries its token: it is written where only its owner can read it, never through a link."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.kubeconfig import KubeconfigError
from tests.polling import wait_until

from .helpers import LineReader

SECRET = "precious: data\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], LineReader]:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kruntimes.devcluster", "--no-simulator", "--token", "s3cret", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    return proc, LineReader(proc)


def _stop(proc: subprocess.Popen[str], *, terminate: bool = True) -> tuple[int, str]:
    """Exit code and stderr, after SIGTERM (``terminate``) or once the process ends by itself."""
    if terminate and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert proc.stdout is not None and proc.stderr is not None
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    return code, err


def test_the_default_kubeconfig_is_private_unpredictable_and_removed_on_exit(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text(SECRET)
    for _ in range(3):  # a port found free can be taken before the dev cluster binds it: pick another
        port = _free_port()
        planted = tmp_path / f"kruntimes-dev-cluster-{port}.kubeconfig"  # the name another local user could predict
        planted.symlink_to(victim)
        proc, out = _start(tmp_path, "--port", str(port))
        wait_until(lambda: proc.poll() is not None or any(line.startswith("kubeconfig: ") for line in out.snapshot()),
                   timeout=10, what="the kubeconfig line or an exit")
        if proc.poll() is None:
            break
        code, err = _stop(proc, terminate=False)
        assert "Address already in use" in err, (code, err)
        planted.unlink()
    try:
        line = out.wait_for(lambda line: line.startswith("kubeconfig: "), what="the kubeconfig line")
        path = Path(line.removeprefix("kubeconfig: ").split(" (")[0])
        assert victim.read_text() == SECRET  # the planted link was not followed
        assert path.parent.parent == tmp_path and path.parent.name.startswith("kruntimes-dev-cluster-")
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600 and not path.is_symlink()
        assert yaml.safe_load(path.read_text())["users"][0]["user"] == {"token": "s3cret"}
    finally:
        code, _ = _stop(proc)
    assert code == 0
    assert not path.exists() and not path.parent.exists()
    assert victim.read_text() == SECRET and planted.is_symlink()


def test_kubeconfig_out_refuses_a_symlink_and_leaves_its_target_alone(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text(SECRET)
    link = tmp_path / "dev.kubeconfig"
    link.symlink_to(victim)
    proc, _ = _start(tmp_path, "--kubeconfig-out", str(link))
    code, err = _stop(proc, terminate=False)
    assert code == 2
    assert "is a symbolic link" in err and str(link) in err
    assert victim.read_text() == SECRET and link.is_symlink()


def test_the_kubeconfig_is_never_written_through_a_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "dev.kubeconfig"
    link.symlink_to(tmp_path / "nowhere")
    with DevCluster.start(simulator=None) as cluster, pytest.raises(KubeconfigError, match="is a symbolic link"):
        cluster.write_kubeconfig(link)
    assert not (tmp_path / "nowhere").exists()


def test_an_existing_kubeconfig_is_replaced_only_if_a_dev_cluster_wrote_it(tmp_path: Path) -> None:
    mine = tmp_path / "config"
    mine.write_text("apiVersion: v1\nkind: Config\ncurrent-context: prod\ncontexts: [{name: prod}]\n")
    with DevCluster.start(simulator=None) as first:
        with pytest.raises(KubeconfigError, match="not a kubeconfig a dev cluster wrote"):
            first.write_kubeconfig(mine)
        assert "current-context: prod" in mine.read_text()
        path = first.kubeconfig_path(tmp_path)
    path.chmod(0o644)
    with DevCluster.start(simulator=None) as second:  # a rerun writes over its own earlier file
        assert second.kubeconfig_path(tmp_path) == path
        assert yaml.safe_load(path.read_text())["clusters"][0]["cluster"]["server"] == second.url
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_kubeconfig_never_replaces_a_directory_or_a_fifo(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    with DevCluster.start(simulator=None) as cluster:
        for name in ("dir", "fifo"):
            with pytest.raises(KubeconfigError, match="not a regular file"):
                cluster.write_kubeconfig(tmp_path / name)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_the_kubeconfig_never_replaces_another_users_file(tmp_path: Path) -> None:
    with DevCluster.start(simulator=None) as cluster:
        theirs = cluster.kubeconfig_path(tmp_path)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(KubeconfigError, match="belongs to another user"):
            cluster.kubeconfig_path(tmp_path)
