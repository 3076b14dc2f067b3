"""`kruntimes runtime-sim`: the flags refuse what would load the wrong place or do nothing (exit 2, one line)."""

from __future__ import annotations

import pytest

from kruntimes.cli import main


def test_it_refuses_to_run_without_an_explicit_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["runtime-sim", "--runtime", "python"])
    assert exited.value.code == 2
    assert "--namespace" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ([], "nothing to simulate"),
        (["--runtime", "python", "--runtime", "python"], "named twice"),
        (["--runtime", "Python_3"], "not a DNS label"),
        (["--follow-runtimes", "--create-runs", "10"], "--create-runs needs the Runs' runtime"),
        (["--runtime", "python", "--until-done"], "--until-done needs --create-runs"),
        (["--runtime", "python", "--create-runs", "5", "--timeout", "10s"], "--timeout needs --until-done"),
    ],
)
def test_flags_that_make_no_sense_together_exit_2_with_the_reason(flags: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runtime-sim", "-n", "load-test", *flags]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [["--capacity", "runs"], ["--capacity", "example.com/gpu=1"], ["--fail-percent", "101"], ["--run-duration", "soon"], ["--qps", "-1"], ["--workers", "0"]],
)
def test_a_malformed_flag_value_exits_2(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["runtime-sim", "-n", "load-test", "--runtime", "python", *flags])
    assert exited.value.code == 2
    assert "error: argument" in capsys.readouterr().err


def test_help_teaches_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["runtime-sim", "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "kruntimes runtime-sim -n load-test --runtime python --replicas 50" in out
