"""The cycle log's files: refused at start-up when unwritable, private (0600), sized for the shipped Deployment,
and never past their budget, however large one cycle's record."""

from __future__ import annotations

import argparse
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from kruntimes.cli import main
from kruntimes.commands import scheduler as command
from kruntimes.effects.cyclelog_writer import DEFAULT_BACKUPS, DEFAULT_MAX_BYTES, CycleLogWriter
from kruntimes.pure.ledger import EMPTY_LEDGER
from kruntimes.pure.model.objects import DEFAULT_CONFIG, Object, RunKey
from kruntimes.pure.model.quantity import parse_quantity
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.readers.cyclelog import CycleRecord, encode_record
from kruntimes.pure.state.cluster import from_objects
from kruntimes.pure.step import plan
from tests.deploy.manifests import DEPLOY, load_one
from tests.builders import NOW, decoded_pod, decoded_run


def scheduler(*args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "kruntimes.cli", "scheduler", "--leader-elect=false", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "HOME": "/nonexistent"},
    )


def test_an_unwritable_cycle_log_path_exits_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    for path, why in (
        (in_the_way / "logs" / "cycles.jsonl", f"cannot create the directory {in_the_way / 'logs'}: {in_the_way} is a file"),
        (tmp_path, f"cannot write {tmp_path}: it is a directory"),
    ):
        done = scheduler("--cycle-log", str(path), "--metrics-bind-address", "0", "--health-probe-bind-address", "0")
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr.splitlines() == [f"kruntimes scheduler: --cycle-log: {why}"]
        assert "Traceback" not in done.stderr


@pytest.fixture
def no_umask() -> Iterator[None]:
    """Umask 0: a file opened with the default mode would be 0666, so 0600 must be the writer's own doing."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_cycle_log_and_every_rotated_file_are_created_mode_0600(tmp_path: Path, no_umask: None) -> None:
    path = tmp_path / "logs" / "cycles.jsonl"
    writer = CycleLogWriter(path, max_bytes=100, backups=2)
    try:
        assert mode(path) == 0o600
        for i in range(4):
            writer.write_line(f'{{"line": {i}, "pad": "{"x" * 60}"}}\n')
    finally:
        writer.close()
    assert writer.errors == 0
    assert writer.files() == (path.with_name("cycles.jsonl.2"), path.with_name("cycles.jsonl.1"), path)
    assert {file.name: mode(file) for file in writer.files()} == {
        "cycles.jsonl.2": 0o600,
        "cycles.jsonl.1": 0o600,
        "cycles.jsonl": 0o600,
    }
    single = tmp_path / "single.jsonl"
    truncating = CycleLogWriter(single, max_bytes=50, backups=0)
    try:
        truncating.write_line("a" * 40 + "\n")
        truncating.write_line("b" * 40 + "\n")
    finally:
        truncating.close()
    assert single.read_text() == "b" * 40 + "\n" and mode(single) == 0o600


def test_the_start_up_check_creates_the_cycle_log_mode_0600(tmp_path: Path, no_umask: None) -> None:
    path = tmp_path / "new" / "cycles.jsonl"
    parser = argparse.ArgumentParser()
    command.configure(parser)
    assert command.options_from(parser.parse_args(["--leader-elect=false", "--cycle-log", str(path)])).problems() == ()
    assert mode(path) == 0o600


def test_the_default_cycle_log_fits_the_shipped_deployments_emptydir_at_the_help_examples_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    command.configure(parser)
    defaults = parser.parse_args([])
    assert (defaults.cycle_log_max_bytes, defaults.cycle_log_backups) == (DEFAULT_MAX_BYTES, DEFAULT_BACKUPS)
    with pytest.raises(SystemExit):
        command_help = argparse.ArgumentParser(prog="kruntimes scheduler")
        command.configure(command_help)
        command_help.parse_args(["--help"])
    help_text = capsys.readouterr().out
    example = re.search(r"kruntimes scheduler --cycle-log (\S+)", help_text)
    assert example is not None, "the --help shows a --cycle-log example"
    example_path = PurePosixPath(example.group(1))

    deployment = load_one(DEPLOY / "scheduler" / "deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True, "else any path would do"
    mounts = [m for m in container["volumeMounts"] if example_path.is_relative_to(m["mountPath"])]
    assert len(mounts) == 1, f"{example_path} is on a writable volume of the Deployment"
    (volume,) = [v for v in pod["volumes"] if v["name"] == mounts[0]["name"]]
    size_limit = parse_quantity(str(volume["emptyDir"]["sizeLimit"]))
    assert size_limit is not None
    # the log's bound, (backups + 1) files of max_bytes, takes at most half: the rest of /tmp needs room too
    assert (DEFAULT_BACKUPS + 1) * DEFAULT_MAX_BYTES <= size_limit / 2
    flat_help = " ".join(help_text.split())
    assert f"at most {(DEFAULT_BACKUPS + 1) * DEFAULT_MAX_BYTES >> 20} MiB in all" in flat_help


def _cycle(run: str, pods: int) -> CycleRecord:
    """The record of one real cycle for ``run`` among ``pods`` Runtime Pods (its size grows with them)."""
    objects: list[Object] = [decoded_pod(f"runtime-pod-with-a-long-name-{i:05d}", capacity={"runs": "4", "cpu": "8"}) for i in range(pods)]
    objects.append(decoded_run(run))
    planned = plan(from_objects(objects), EMPTY_LEDGER, RunKey("default", run), NOW, DEFAULT_CONFIG)
    registry = DEFAULT_REGISTRY
    return CycleRecord(planned.snapshot, registry.weights, planned.planned, tuple(entry.name for entry in registry.filters))


def test_a_record_larger_than_the_budget_leaves_the_log_within_it_and_replay_lists_it_as_not_replayable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cycles.jsonl"
    budget, backups = 16 * 1024, 1
    small, big = _cycle("small", 2), _cycle("big", 400)
    assert len(encode_record(big)) > 4 * budget, "the big cycle is far over the budget"
    writer = CycleLogWriter(path, max_bytes=budget, backups=backups)
    try:
        for _ in range(3):
            writer.write(small)
        writer.write(big)
        writer.write(small)
    finally:
        writer.close()
    sizes = {file.name: file.stat().st_size for file in writer.files()}
    assert all(size <= budget for size in sizes.values()), sizes
    assert sum(sizes.values()) <= (backups + 1) * budget
    assert (writer.written, writer.truncated, writer.dropped, writer.errors) == (5, 1, 0, 0)
    logged = path.read_text(encoding="utf-8").splitlines()
    marker = next(number for number, line in enumerate(logged, 1) if '"truncated"' in line)

    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    replayable = len(logged) - 1
    assert out.splitlines() == [
        f"{path}: {replayable} of {replayable} records identical",
        "1 record was too large for the log and not replayable (written as markers):",
        f"  line {marker}, run default/big: Bind, {len(encode_record(big)) + 1} bytes",
    ]


def test_a_line_that_cannot_fit_the_budget_even_as_a_marker_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "cycles.jsonl"
    writer = CycleLogWriter(path, max_bytes=64, backups=0)
    try:
        writer.write(_cycle("a-run-whose-marker-alone-is-longer-than-sixty-four-bytes", 1))
        writer.write_line("x" * 100 + "\n")
    finally:
        writer.close()
    assert path.read_text() == ""
    assert (writer.written, writer.truncated, writer.dropped) == (0, 1, 2)

