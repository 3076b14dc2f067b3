"""What README.md and docs/ tell a user about flags, defaults, metrics and messages is what the
code does: a user copies these into commands, alerts and searches."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from returns.result import Result

from kruntimes.cli import build_parser
from kruntimes.kubeclient.kube import ApiError, JSONObject
from kruntimes.effects.metrics import SchedulerMetrics
from kruntimes.kubeclient.secureserving import DelegatedAuth
from kruntimes.pure.ledger import EMPTY_LEDGER
from kruntimes.pure.model.objects import DEFAULT_CONFIG, RunKey
from kruntimes.pure.state.cluster import from_objects
from kruntimes.pure.step import EventNote, transact
from tests.builders import NOW, decoded_run

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"\bkruntimes (simulate|replay|scheduler|dev-cluster|runtime-sim|explain|demo)\b")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def commands() -> dict[str, argparse.ArgumentParser]:
    parser, _ = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def command_lines(document: str) -> Iterator[str]:
    """Each `kruntimes <command> ...` a user would type: inline code spans, and the lines of code
    blocks (continuation lines joined)."""
    yield from re.findall(r"`([^`\n]*kruntimes [^`\n]*)`", document)
    for block in re.findall(r"```(?:sh|bash|console|shell)?\n(.*?)```", document, flags=re.DOTALL):
        yield from block.replace("\\\n", " ").splitlines()


def documented_invocations() -> list[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for path in DOCUMENTS:
        for line in command_lines(text(path)):
            match = COMMAND.search(line)
            if match is None:
                continue
            rest = line[match.end() :].split("#", 1)[0]
            rest = re.split(r"[|;&]", rest, maxsplit=1)[0]
            for flag in FLAG.findall(rest):
                found.add((path.name, match.group(1), flag))
    return sorted(found)


@pytest.mark.parametrize(("document", "command", "flag"), documented_invocations())
def test_every_flag_a_documented_command_line_passes_is_one_that_command_accepts(
    document: str, command: str, flag: str
) -> None:
    assert flag in commands()[command]._option_string_actions, f"{document}: kruntimes {command} {flag}"


def test_the_documents_show_command_lines_with_flags() -> None:
    assert {(c, f) for _, c, f in documented_invocations()} >= {("scheduler", "--kubeconfig"), ("explain", "--cycle-log")}


DEFAULT = re.compile(r"`(--[a-z][a-z0-9-]*)` \((?:default:? )?([0-9][^,;)]*)[,;)]")


def documented_defaults() -> list[tuple[str, str, str]]:
    return sorted({(path.name, flag, value) for path in DOCUMENTS for flag, value in DEFAULT.findall(text(path))})


def stated_default(action: argparse.Action) -> str:
    help_text = re.sub(r"\s+", "", action.help or "")
    at = help_text.find("(default")
    return help_text[at:] if at >= 0 else ""


@pytest.mark.parametrize(("document", "flag", "value"), documented_defaults())
def test_every_default_the_documents_give_a_flag_is_the_one_its_help_states(document: str, flag: str, value: str) -> None:
    owners = [p._option_string_actions[flag] for p in commands().values() if flag in p._option_string_actions]
    assert owners, f"{document}: {flag} is no command's flag"
    wanted = value.replace(" ", "")
    # a flag whose metavar is S takes seconds: its help states the bare number
    seconds = wanted[:-1] if wanted.endswith("s") else wanted
    assert any(
        wanted in stated_default(action) or (action.metavar == "S" and seconds in stated_default(action)) for action in owners
    ), (document, flag, value, [a.help for a in owners])


def test_the_documents_give_defaults_for_the_rate_limit_and_the_lease() -> None:
    flags = {flag for _, flag, _ in documented_defaults()}
    assert {"--kube-api-qps", "--kube-api-burst", "--leader-elect-lease-duration"} <= flags


# --- metrics ------------------------------------------------------------------------------------


class UnusedReviewer:
    """Registering the secure port's families asks nothing of the API server."""

    def create(self, path: str, body: Mapping[str, object]) -> Result[JSONObject, ApiError]:
        raise AssertionError("no review is made at registration")


def exposed_series() -> dict[str, dict[str, set[str]]]:
    """Every family the scheduler can expose, with the label values present from start-up."""
    registry = SchedulerMetrics().registry
    DelegatedAuth(UnusedReviewer(), registry=registry)
    out: dict[str, dict[str, set[str]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        labels = out.setdefault(family.name, {})
        for sample in family.samples:
            for label, value in sample.labels.items():
                labels.setdefault(label, set()).add(value)
    return out


def documented_metric_names() -> list[tuple[str, str]]:
    return sorted(
        {(path.name, name) for path in DOCUMENTS for name in re.findall(r"\bkruntimes_[a-z_]*[a-z]\b", text(path))}
    )


def family_of(name: str, families: dict[str, dict[str, set[str]]]) -> str | None:
    for suffix in ("", "_total", "_bucket", "_count", "_sum"):
        if name.endswith(suffix) and name[: len(name) - len(suffix)] in families:
            return name[: len(name) - len(suffix)]
    return None


@pytest.mark.parametrize(("document", "name"), documented_metric_names())
def test_every_metric_the_documents_name_is_exposed(document: str, name: str) -> None:
    assert family_of(name, exposed_series()) is not None, f"{document}: {name}"


def documented_label_values() -> list[tuple[str, str, str, str]]:
    """The metric tables of docs/spec.md §9 and docs/operations.md: `name` | ... `label` ∈ {a, b}
    or `label`: `a`, `b` (a value's own note in brackets)."""
    rows: set[tuple[str, str, str, str]] = set()
    for path in (ROOT / "docs" / "spec.md", ROOT / "docs" / "operations.md"):
        for line in text(path).splitlines():
            name = re.match(r"\| `(kruntimes_[a-z_]+)` \|", line)
            if name is None:
                continue
            for match in re.finditer(r"`([a-z_]+)` ∈ \{([^}]*)\}", line):
                for value in match.group(2).split(","):
                    rows.add((path.name, name.group(1), match.group(1), value.strip()))
            for match in re.finditer(r"`([a-z_]+)`: ((?:`[^`]+`(?: \([^)]*\))?(?:, |; |(?= \|)))+)", line):
                for value in re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", match.group(2))):
                    rows.add((path.name, name.group(1), match.group(1), value))
    return sorted(rows)


@pytest.mark.parametrize(("document", "name", "label", "value"), documented_label_values())
def test_every_label_value_the_metric_tables_list_is_a_series_from_start_up(
    document: str, name: str, label: str, value: str
) -> None:
    families = exposed_series()
    family = family_of(name, families)
    assert family is not None, f"{document}: {name}"
    assert value in families[family].get(label, set()), f"{document}: {name}{{{label}={value!r}}}"


def test_the_metric_tables_list_label_values() -> None:
    listed = {(n, label) for _, n, label, _ in documented_label_values()}
    assert {("kruntimes_scheduler_sync_total", "result"), ("kruntimes_scheduler_cycle_outcomes_total", "outcome")} <= listed
    assert ("kruntimes_scheduler_skipped_objects_total", "thread") in listed


# --- messages -----------------------------------------------------------------------------------


def test_the_messages_a_run_without_runtime_pods_shows_are_the_ones_deploy_md_quotes() -> None:
    deploy = re.sub(r"\s+", " ", text(ROOT / "docs" / "deploy.md"))
    status = re.search(r"stays `Pending` with the message `([^`]+)`", deploy)
    event = re.search(r"its `FailedScheduling` Event says `([^`]+)`", deploy)
    assert status is not None and event is not None
    step = transact(from_objects([decoded_run("r")]), EMPTY_LEDGER, RunKey("default", "r"), NOW, DEFAULT_CONFIG)
    assert step.write is not None
    assert step.write.patch.message == status.group(1).replace("<name>", "python")
    assert step.settled.event == EventNote("Warning", "FailedScheduling", event.group(1).replace("<name>", "python"))
