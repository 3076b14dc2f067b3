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


def test_metrics_stay_plain_http_unless_metrics_secure_is_given() -> None:
    assert _options().metrics_secure is None
    assert _options("--metrics-secure=false").metrics_secure is None


def test_metrics_secure_takes_kube_schedulers_companion_flags() -> None:
    secure = _options(
        "--metrics-secure",
        "--authorization-always-allow-paths=/healthz,/debug/*",
        "--authentication-token-webhook-cache-ttl=30s",
        "--authorization-webhook-cache-authorized-ttl=1m",
        "--authorization-webhook-cache-unauthorized-ttl=0s",
    ).metrics_secure
    assert secure is not None
    assert secure.cert_file is None and secure.key_file is None, "no files: a self-signed certificate"
    assert secure.always_allow_paths == ("/healthz", "/debug/*")
    assert (secure.token_cache_ttl, secure.allowed_cache_ttl, secure.denied_cache_ttl) == (30.0, 60.0, 0.0)
    default = _options("--metrics-secure").metrics_secure
    assert default is not None and default.always_allow_paths == ("/healthz", "/readyz", "/livez")


def test_tls_files_without_metrics_secure_are_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["scheduler", "--leader-elect=false", "--tls-cert-file=/x.crt", "--tls-private-key-file=/x.key"])
    assert code == 2
    assert "only apply with --metrics-secure" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (("--metrics-secure", "--metrics-bind-address=0"), "--metrics-secure needs a metrics port"),
        (("--metrics-secure", "--tls-cert-file=/nonexistent.crt"), "go together"),
        (("--metrics-secure", "--tls-cert-file=/nonexistent.crt", "--tls-private-key-file=/nonexistent.key"), "--tls-cert-file"),
        (("--metrics-secure", "--authorization-always-allow-paths=healthz"), "does not start with /"),
    ],
)
def test_unusable_secure_serving_flags_are_problems(argv: tuple[str, ...], problem: str) -> None:
    assert any(problem in p for p in _options(*argv).problems())


def test_single_leader_stays_the_default_and_shard_by_namespace_opts_in() -> None:
    assert _options().shard_group is None
    sharded = _options("--shard-by-namespace", "--leader-elect-lease-duration=20s", "--namespace=a", "--namespace=b")
    assert sharded.shard_group == "kruntimes-scheduler"
    assert sharded.leader_election is not None and sharded.leader_election.lease_duration == 20.0
    assert sharded.namespaces == ("a", "b")
    assert sharded.problems() == ()
    assert _options("--shard-by-namespace", "--shard-group=blue").shard_group == "blue"


def test_sharding_without_leases_is_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["scheduler", "--shard-by-namespace", "--leader-elect=false"])
    assert code == 2
    assert "cannot run with --leader-elect=false" in capsys.readouterr().err


def test_a_shard_group_that_is_not_a_dns_label_is_a_problem() -> None:
    problems = _options("--shard-by-namespace", "--shard-group=Blue_Team").problems()
    assert any("--shard-group 'Blue_Team' must be a DNS label" in p for p in problems)
