"""``kruntimes scheduler``: leader election on by default, one Lease for every documented way to run it, and ``--config``."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.pipeline import is_successful

from kruntimes.cli import main as cli_main
from kruntimes.commands import scheduler as command
from kruntimes.kubeclient.leader import DEFAULT_LEASE_NAME as ELECTOR_LEASE_NAME
from kruntimes.kubeclient.leader import LeaseTimings
from kruntimes.effects.runner import SchedulerOptions
from kruntimes.pure.framework.registry import RegistryError
from kruntimes.pure.model.plan import Bind
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.queueing import FIFO, NAMESPACE_FAIR
from kruntimes.pure.readers.config import (
    DEFAULT_CONFIGURATION,
    DEFAULT_LEASE_NAME,
    SchedulerConfiguration,
    decode_configuration,
    format_configuration,
)
from tests.conftest import examples
from tests.deploy.manifests import DEPLOY, load_all, only
from tests.builders import affinity_json, decoded_run, term
from tests.pure.planning_world import plan, slot, snapshot, target

REPO = Path(__file__).resolve().parents[2]
HEADER = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "SchedulerConfiguration"}
NOWHERE = Path("/nonexistent/serviceaccount/namespace")
"""No service account: the process runs outside a cluster."""


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.configure(parser)
    return parser.parse_args(list(argv))


def _options(
    *argv: str,
    environ: Mapping[str, str] | None = None,
    configuration: SchedulerConfiguration = DEFAULT_CONFIGURATION,
    service_account: Path = NOWHERE,
) -> SchedulerOptions:
    return command.options_from(
        _parse(*argv), configuration, environ=environ or {}, service_account_namespace=service_account
    )


def _lease(options: SchedulerOptions) -> tuple[str, str] | None:
    election = options.leader_election
    return None if election is None else (election.namespace, election.name)


def _decoded(document: object) -> SchedulerConfiguration:
    result = decode_configuration(document)
    assert is_successful(result), str(result.failure())
    return result.unwrap()


# --- leader election by default ------------------------------------------------------------------


def test_a_scheduler_in_a_pod_elects_a_leader_without_any_flag() -> None:
    options = _options(environ={"POD_NAMESPACE": "team-sched", "POD_NAME": "kruntimes-scheduler-7d9f-x2"})
    assert _lease(options) == ("team-sched", "kruntimes-scheduler")
    assert options.identity.startswith("kruntimes-scheduler-7d9f-x2_")
    assert options.problems() == ()


def test_without_pod_namespace_the_lease_goes_to_the_service_account_namespace(tmp_path: Path) -> None:
    service_account = tmp_path / "namespace"
    service_account.write_text("ops\n", encoding="utf-8")
    assert _lease(_options(service_account=service_account)) == ("ops", "kruntimes-scheduler")


def test_outside_a_cluster_the_lease_namespace_is_required_and_the_error_says_how(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setattr(command, "SERVICE_ACCOUNT_NAMESPACE", NOWHERE)
    assert cli_main(["scheduler", "--kubeconfig", "/nonexistent/kubeconfig"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kruntimes scheduler: leader election needs the Lease's namespace outside a cluster")
    for fix in ("--leader-elect-resource-namespace NS", "kruntimes-system", "leaderElection.resourceNamespace",
                "--leader-elect=false"):
        assert fix in err


@pytest.mark.parametrize(
    ("argv", "elects"),
    [
        ((), True),
        (("--leader-elect",), True),
        (("--leader-elect=true",), True),
        (("--leader-elect=True",), True),
        (("--leader-elect=1",), True),
        (("--leader-elect=false",), False),
        (("--leader-elect=FALSE",), False),
        (("--leader-elect=0",), False),
        (("--leader-elect", "--leader-elect=false"), False),
    ],
)
def test_leader_elect_takes_kube_scheduler_bool_forms(argv: tuple[str, ...], elects: bool) -> None:
    options = _options(*argv, environ={"POD_NAMESPACE": "ns"})
    assert (options.leader_election is not None) is elects


def test_leader_elect_refuses_a_value_that_is_not_a_boolean(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main(["scheduler", "--leader-elect=maybe"])
    assert exit_.value.code == 2
    assert "--leader-elect: 'maybe' is not true or false" in capsys.readouterr().err


def test_kube_scheduler_lease_flags_and_the_older_names_set_the_same_lease() -> None:
    new = _options("--leader-elect-resource-name", "other", "--leader-elect-resource-namespace", "ns1")
    old = _options("--leader-elect-lease-name", "other", "--leader-elect-namespace", "ns1")
    assert _lease(new) == _lease(old) == ("ns1", "other")


def test_an_explicit_lease_namespace_wins_over_the_pod_namespace() -> None:
    options = _options("--leader-elect-resource-namespace", "elsewhere", environ={"POD_NAMESPACE": "mine"})
    assert _lease(options) == ("elsewhere", "kruntimes-scheduler")


def test_the_configuration_default_lease_name_is_the_electors() -> None:
    assert DEFAULT_LEASE_NAME == ELECTOR_LEASE_NAME


def test_a_configuration_file_without_lease_timings_elects_with_the_clients_timings() -> None:
    election = DEFAULT_CONFIGURATION.leader_election
    given = (election.lease_duration, election.renew_deadline, election.retry_period)
    client = LeaseTimings()
    assert tuple(t.total_seconds() for t in given) == (client.lease_duration, client.renew_deadline, client.retry_period)
    options = _options(environ={"POD_NAMESPACE": "mine"})
    assert options.leader_election is not None
    assert LeaseTimings(lease_duration=options.leader_election.lease_duration, renew_deadline=options.leader_election.renew_deadline,
                        retry_period=options.leader_election.retry_period) == client


def _readme_scheduler_commands(path: Path) -> list[list[str]]:
    """Every ``kruntimes scheduler`` command line in the sh blocks of a document."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.DOTALL):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["kruntimes", "scheduler"]:
                commands.append(words[2:])
    return commands


def _deployment_lease() -> tuple[str, str] | None:
    deployment = only(load_all(DEPLOY / "scheduler" / "deployment.yaml"), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    pod_env = {"POD_NAMESPACE": deployment["metadata"]["namespace"], "POD_NAME": "kruntimes-scheduler-0"}
    return _lease(_options(*container["args"], environ=pod_env))


@pytest.mark.parametrize("document", ["README.md", "docs/deploy.md"])
def test_every_documented_out_of_cluster_command_contends_for_the_deployments_lease(document: str) -> None:
    commands = _readme_scheduler_commands(REPO / document)
    assert commands, f"{document} shows no `kruntimes scheduler` command"
    deployment = _deployment_lease()
    assert deployment == ("kruntimes-system", "kruntimes-scheduler")
    for argv in commands:
        assert _lease(_options(*argv)) == deployment, f"{document}: kruntimes scheduler {shlex.join(argv)}"


# --- the configuration file: errors name the field -------------------------------------------------


@pytest.mark.parametrize(
    ("document", "where", "says"),
    [
        ({"kind": "SchedulerConfiguration"}, "apiVersion", "is missing"),
        ({**HEADER, "kind": "KubeSchedulerConfiguration"}, "kind", "must be SchedulerConfiguration"),
        ({**HEADER, "wrokers": 2}, "wrokers", "unknown field"),
        ({**HEADER, "workers": 0}, "workers", "must be at least 1"),
        ({**HEADER, "workers": "4"}, "workers", "must be an integer"),
        ({**HEADER, "queueOrder": "lifo"}, "queueOrder", "must be one of fifo, namespace-fair"),
        ({**HEADER, "heartbeatStaleAfter": "soon"}, "heartbeatStaleAfter", "must be a Go duration"),
        ({**HEADER, "heartbeatStaleAfter": "-1s"}, "heartbeatStaleAfter", "must not be negative"),
        ({**HEADER, "heartbeatStaleAfter": 15}, "heartbeatStaleAfter", 'quote it: "15"'),
        ({**HEADER, "leaderElection": {"leaderElect": "yes"}}, "leaderElection.leaderElect", "must be a boolean"),
        ({**HEADER, "leaderElection": {"resourceLock": "leases"}}, "leaderElection.resourceLock", "unknown field"),
        ({**HEADER, "leaderElection": {"resourceNamespace": ""}}, "leaderElection.resourceNamespace", "non-empty"),
        ({**HEADER, "leaderElection": {"retryPeriod": "0s"}}, "leaderElection.retryPeriod", "must be positive"),
        (
            {**HEADER, "leaderElection": {"leaseDuration": "8s"}},
            "leaderElection.leaseDuration",
            "must be longer than renewDeadline (10s)",
        ),
        ({**HEADER, "profiles": []}, "profiles", "exactly one profile"),
        ({**HEADER, "profiles": [{"pluginConfig": []}]}, "profiles[0].pluginConfig", "unknown field"),
        (
            {**HEADER, "profiles": [{"plugins": {"score": {"enabled": [{"name": "MostLoaded"}]}}}]},
            "profiles[0].plugins.score.enabled[0].name",
            'no score plugin "MostLoaded" is registered (expected one of: PreferredRunAffinity, LeastLoaded)',
        ),
        (
            {**HEADER, "profiles": [{"plugins": {"score": {"enabled": [{"name": "RunAffinity"}]}}}]},
            "profiles[0].plugins.score.enabled[0].name",
            'no score plugin "RunAffinity"',
        ),
        (
            {**HEADER, "profiles": [{"plugins": {"score": {"enabled": [{"name": "LeastLoaded", "weight": 0}]}}}]},
            "profiles[0].plugins.score.enabled[0].weight",
            "must be a positive integer",
        ),
        (
            {**HEADER, "profiles": [{"plugins": {"filter": {"enabled": [{"name": "RunAffinity", "weight": 2}]}}}]},
            "profiles[0].plugins.filter.enabled[0].weight",
            "unknown field",
        ),
        (
            {**HEADER, "profiles": [{"plugins": {"filter": {"disabled": [{"name": "RuntimePodAvailability"}]}}}]},
            "profiles[0].plugins.filter.disabled[0].name",
            "cannot be disabled",
        ),
        (
            {**HEADER, "profiles": [{"plugins": {"score": {"enabled": [{"name": "LeastLoaded"}] * 2}}}]},
            "profiles[0].plugins.score.enabled[1].name",
            "is listed twice",
        ),
        ({**HEADER, "profiles": [{"plugins": {"permit": {}}}]}, "profiles[0].plugins.permit", "unknown field"),
    ],
)
def test_each_invalid_field_is_an_error_naming_its_path(document: object, where: str, says: str) -> None:
    result = decode_configuration(document)
    assert not is_successful(result)
    error = result.failure()
    assert error.path == where
    assert says in error.message


def test_a_bad_config_file_exits_2_naming_the_file_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scheduler.yaml"
    path.write_text("apiVersion: kruntimes.io/v1alpha1\nkind: SchedulerConfiguration\nworkers: -3\n", encoding="utf-8")
    assert cli_main(["scheduler", "--config", str(path)]) == 2
    assert capsys.readouterr().err == f"kruntimes scheduler: --config {path}: workers: must be at least 1, not -3\n"


def test_a_config_number_longer_than_python_converts_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scheduler.yaml"
    path.write_text("apiVersion: kruntimes.io/v1alpha1\nkind: SchedulerConfiguration\nworkers: " + "9" * 5000 + "\n", encoding="utf-8")
    assert cli_main(["scheduler", "--config", str(path)]) == 2
    assert capsys.readouterr().err == f"kruntimes scheduler: --config {path}: workers: must be an integer, not a number of 5000 digits\n"


@pytest.mark.parametrize(("text", "says"), [("workers: [", "not valid YAML"), (None, "cannot read it")])
def test_an_unreadable_config_file_exits_2_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, says: str
) -> None:
    path = tmp_path / "scheduler.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    assert cli_main(["scheduler", "--config", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"kruntimes scheduler: --config {path}: {says}")


# --- the configuration file: meaning -----------------------------------------------------------------


def test_the_printed_default_configuration_loads_back_as_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["scheduler", "--print-default-config"]) == 0
    printed = capsys.readouterr().out
    assert _decoded(yaml.safe_load(printed)) == DEFAULT_CONFIGURATION
    # and it spells out every plugin with its weight, so editing it is the way to change one
    for name in DEFAULT_REGISTRY.names:
        assert f"- name: {name}" in printed


def test_a_changed_configuration_prints_and_loads_back_unchanged() -> None:
    changed = _decoded(
        {
            **HEADER,
            "workers": 9,
            "queueOrder": "namespace-fair",
            "heartbeatStaleAfter": "1m30s",
            "leaderElection": {"leaderElect": False, "resourceName": "true", "resourceNamespace": ".5"},
            "profiles": [
                {
                    "schedulerName": "mine",
                    "plugins": {
                        "filter": {"disabled": [{"name": "*"}]},
                        "score": {"disabled": [{"name": "*"}], "enabled": [{"name": "LeastLoaded", "weight": 7}]},
                    },
                }
            ],
        }
    )
    assert changed.registry.names == ("RuntimePodAvailability", "LeastLoaded")
    assert changed.registry.weights == (("LeastLoaded", 7),)
    assert (changed.leader_election.resource_name, changed.leader_election.resource_namespace) == ("true", ".5")
    assert _decoded(yaml.safe_load(format_configuration(changed))) == changed


def test_filters_keep_the_registry_order_whatever_order_a_file_lists_them_in() -> None:
    listed = [{"name": "WorkspacePlacement"}, {"name": "RunAffinity"}, {"name": "RuntimePodAvailability"}]
    configuration = _decoded({**HEADER, "profiles": [{"plugins": {"filter": {"enabled": listed}}}]})
    assert configuration.registry.names == DEFAULT_REGISTRY.names


def test_an_empty_header_only_file_is_the_default_configuration() -> None:
    assert _decoded(dict(HEADER)) == DEFAULT_CONFIGURATION


def test_the_help_teaches_the_file_with_an_example_that_loads(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["scheduler", "--help"])
    out = capsys.readouterr().out
    assert "--config FILE" in out and "--print-default-config" in out
    example = out.split("\na --config file (", 1)[1].split("\n\n", 1)[0].split("\n", 1)[1]
    configuration = _decoded(yaml.safe_load(example))
    assert configuration.queue_order == "namespace-fair"
    assert configuration.registry.weights == (("LeastLoaded", 3),)


def test_the_deploy_guides_example_file_loads_as_it_describes() -> None:
    text = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```yaml\n(apiVersion: kruntimes.io/v1alpha1\nkind: SchedulerConfiguration\n.*?)```", text, re.DOTALL)
    configuration = _decoded(yaml.safe_load(example))
    assert configuration.leader_election.resource_namespace == "kruntimes-system"
    assert configuration.registry.names == ("RuntimePodAvailability", "RunAffinity", "LeastLoaded")
    assert configuration.registry.weights == (("LeastLoaded", 3),)


def test_flags_given_override_the_file_and_the_file_fills_in_the_rest() -> None:
    configuration = _decoded(
        {
            **HEADER,
            "workers": 8,
            "queueOrder": "namespace-fair",
            "heartbeatStaleAfter": "30s",
            "leaderElection": {"resourceNamespace": "from-file", "resourceName": "file-lease", "leaseDuration": "20s"},
        }
    )
    from_file = _options(configuration=configuration)
    assert (from_file.workers, from_file.queue_order, from_file.heartbeat_stale_after.total_seconds()) == (
        8,
        NAMESPACE_FAIR,
        30.0,
    )
    assert _lease(from_file) == ("from-file", "file-lease")
    assert from_file.leader_election is not None and from_file.leader_election.lease_duration == 20.0
    overridden = _options(
        "--workers=2",
        "--queue-order=fifo",
        "--heartbeat-stale-after=5s",
        "--leader-elect-resource-namespace=from-flag",
        "--leader-elect-lease-duration=30s",
        configuration=configuration,
    )
    assert (overridden.workers, overridden.queue_order, overridden.heartbeat_stale_after.total_seconds()) == (
        2,
        FIFO,
        5.0,
    )
    assert _lease(overridden) == ("from-flag", "file-lease")
    assert overridden.leader_election is not None and overridden.leader_election.lease_duration == 30.0
    assert _options("--leader-elect=false", configuration=configuration).leader_election is None


def test_a_file_can_turn_election_off_and_the_flag_back_on() -> None:
    off = _decoded({**HEADER, "leaderElection": {"leaderElect": False}})
    assert _options(configuration=off).leader_election is None
    assert _lease(_options("--leader-elect", environ={"POD_NAMESPACE": "ns"}, configuration=off)) == (
        "ns",
        "kruntimes-scheduler",
    )


def test_a_file_that_drops_a_score_plugin_and_reweights_another_changes_the_chosen_pod() -> None:
    # Pod a already runs a Run this one prefers to join, and is half full; b is empty.
    run = decoded_run("r", affinity=affinity_json(preferred=[(10, term({"app": "x"}))]))
    world = snapshot(run, [slot("a", {"runs": "4"}, {"runs": 2}), slot("b", {"runs": "4"})], [target("a", {"app": "x"})])
    by_default = plan(world, DEFAULT_CONFIGURATION.registry)
    assert isinstance(by_default, Bind) and by_default.pod == "a"
    spread = _decoded(
        {
            **HEADER,
            "profiles": [
                {
                    "plugins": {
                        "score": {
                            "disabled": [{"name": "PreferredRunAffinity"}],
                            "enabled": [{"name": "LeastLoaded", "weight": 3}],
                        }
                    }
                }
            ],
        }
    )
    configured = plan(world, spread.registry)
    assert isinstance(configured, Bind) and configured.pod == "b"
    assert configured.scores[0].by_plugin == (("LeastLoaded", 100),) and configured.scores[0].total == 300


def test_the_scheduler_is_started_with_the_files_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "scheduler.yaml"
    path.write_text(
        "apiVersion: kruntimes.io/v1alpha1\nkind: SchedulerConfiguration\nworkers: 3\n"
        "leaderElection: {leaderElect: false}\n"
        "profiles: [{plugins: {score: {disabled: [{name: LeastLoaded}]}}}]\n",
        encoding="utf-8",
    )
    started: list[tuple[SchedulerOptions, tuple[str, ...]]] = []

    class Recorded:
        def __init__(self, kube: object, options: SchedulerOptions, *, registry: object) -> None:
            assert hasattr(registry, "names")
            started.append((options, registry.names))

        def start(self) -> None:
            raise OSError("stop here")

        def stop(self, timeout: float) -> bool:
            return True

    class Kube:
        host = "https://cluster.example"

        def close(self) -> None:
            pass

    from returns.result import Success

    monkeypatch.setattr(command, "connect", lambda *args, **kwargs: Success(Kube()))
    monkeypatch.setattr(command, "Scheduler", Recorded)
    assert cli_main(["scheduler", "--config", str(path), "--metrics-bind-address=0", "--health-probe-bind-address=0"]) == 1
    ((options, names),) = started
    assert options.workers == 3 and options.leader_election is None
    assert names == ("RuntimePodAvailability", "RunAffinity", "WorkspacePlacement", "PreferredRunAffinity")


# --- the registry ------------------------------------------------------------------------------------


def test_a_registry_without_a_plugin_keeps_the_others_in_order() -> None:
    without = DEFAULT_REGISTRY.without("RunAffinity").unwrap()
    assert without.names == ("RuntimePodAvailability", "WorkspacePlacement", "PreferredRunAffinity", "LeastLoaded")
    assert DEFAULT_REGISTRY.without("LeastLoaded").unwrap().weights == (("PreferredRunAffinity", 1),)
    missing = DEFAULT_REGISTRY.without("Nope").failure()
    assert missing == RegistryError("UnknownPlugin", 'no plugin "Nope" is registered')


NAMES: st.SearchStrategy[str] = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)
"""Any string a YAML file can hold (no lone surrogates)."""


@settings(max_examples=examples(200), deadline=None)
@given(
    name=NAMES,
    namespace=st.one_of(st.none(), NAMES),
    profile=NAMES,
)
def test_any_lease_or_profile_name_prints_and_loads_back_as_itself(name: str, namespace: str | None, profile: str) -> None:
    configuration = _decoded(
        {
            **HEADER,
            "leaderElection": {"resourceName": name, **({} if namespace is None else {"resourceNamespace": namespace})},
            "profiles": [{"schedulerName": profile}],
        }
    )
    assert _decoded(yaml.safe_load(format_configuration(configuration))) == configuration
