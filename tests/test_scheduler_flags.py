"""``kruntimes scheduler`` flags: the heartbeat window (SPEC §1: ≤ 0 means the default, 15 s)."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from kruntimes.cli import main as cli_main
from kruntimes.commands import scheduler as command
from kruntimes.effects.runner import SchedulerOptions


def _options(*argv: str) -> SchedulerOptions:
    parser = argparse.ArgumentParser()
    command.configure(parser)
    # A Lease namespace, as a pod has one: these tests are about the other flags.
    return command.options_from(parser.parse_args(["--leader-elect-resource-namespace=ns", *argv]))


@pytest.mark.parametrize("zero", ["0", "0s", "-0", "0ms"])
def test_a_zero_heartbeat_window_starts_with_the_default_of_fifteen_seconds(zero: str) -> None:
    options = _options(f"--heartbeat-stale-after={zero}")
    assert options.heartbeat_stale_after == timedelta(seconds=15)
    assert options.problems() == ()


def test_a_tiny_or_huge_heartbeat_window_is_kept_as_given() -> None:
    assert _options("--heartbeat-stale-after", "1ns").heartbeat_stale_after == timedelta(microseconds=1)
    assert _options("--heartbeat-stale-after", "1000000h").heartbeat_stale_after == timedelta(hours=1_000_000)


def test_a_negative_heartbeat_window_is_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main(["scheduler", "--heartbeat-stale-after=-1s"])
    assert exit_.value.code == 2
    assert "must not be negative (0 means the default, 15s)" in capsys.readouterr().err


def test_help_says_zero_means_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["scheduler", "--help"])
    assert "0 means the default" in " ".join(capsys.readouterr().out.split())
