"""`kruntimes replay`: a logged cycle re-plans to the same decision, and edits are caught."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest

from kruntimes.cli import main

REPO: Final = Path(__file__).resolve().parents[2]
EXAMPLE: Final = REPO / "examples" / "weighted-scoring.yaml"


@pytest.fixture
def cycle_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    log = tmp_path / "cycles.jsonl"
    assert main(["simulate", "--cycle-log", str(log), str(EXAMPLE)]) == 0
    capsys.readouterr()
    return log


def lines(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines()


def edit_first(log: Path, edit: Callable[[Any], None]) -> None:
    """Rewrite the first record after ``edit`` changed its JSON document in place."""
    records = lines(log)
    document = json.loads(records[0])
    edit(document)
    records[0] = json.dumps(document)
    log.write_text("\n".join(records) + "\n", encoding="utf-8")


def test_every_simulated_cycle_replays_identically(cycle_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert len(lines(cycle_log)) == 12
    assert main(["replay", str(cycle_log)]) == 0
    assert capsys.readouterr().out == f"{cycle_log}: 12 of 12 records identical\n"


def test_the_log_is_appended_to_and_blank_lines_are_skipped(
    cycle_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--cycle-log", str(cycle_log), str(EXAMPLE)]) == 0
    with cycle_log.open("a", encoding="utf-8") as log:
        log.write("\n")
    assert main(["replay", str(cycle_log)]) == 0
    assert "24 of 24 records identical" in capsys.readouterr().out


def test_a_log_whose_waits_carry_a_requeue_interval_still_replays_identically(
    cycle_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Logs written while a Wait carried its own interval (``requeue_after``) read and replay as before."""
    records = [json.loads(line) for line in lines(cycle_log)]
    waits = [record for record in records if record["plan"]["action"] == "Wait"]
    assert waits and all("requeue_after" not in record["plan"] for record in waits)
    for record in waits:
        record["plan"]["requeue_after"] = 30.0
    cycle_log.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    assert main(["replay", str(cycle_log)]) == 0
    assert capsys.readouterr().out == f"{cycle_log}: 12 of 12 records identical\n"


def test_an_edited_logged_pod_is_a_difference_naming_the_field(
    cycle_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(document: Any) -> None:
        document["plan"]["pod"] = "runtime-b"

    edit_first(cycle_log, edit)
    assert main(["replay", str(cycle_log)]) == 1
    out = capsys.readouterr().out
    assert "11 of 12 records identical" in out
    assert "line 1, run default/pick:" in out
    assert re.search(r'plan\.pod +logged "runtime-b"\n +replay "runtime-c"\n', out)


def test_an_edited_snapshot_capacity_changes_the_replayed_plan(
    cycle_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(document: Any) -> None:
        for slot in document["snapshot"]["pods"]:
            if slot["pod"]["name"] == "runtime-b":
                slot["pod"]["capacity"]["runs"] = "40"

    edit_first(cycle_log, edit)
    assert main(["replay", str(cycle_log)]) == 1
    out = capsys.readouterr().out
    assert "plan.pod" in out and "plan.scores[runtime-b].LeastLoaded" in out
    assert 'logged "runtime-c"' in out


def test_a_garbage_line_exits_2_with_its_line_number(cycle_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = lines(cycle_log)
    records.insert(3, "{this is not json")
    cycle_log.write_text("\n".join(records) + "\n", encoding="utf-8")
    assert main(["replay", str(cycle_log)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{cycle_log}:4: malformed cycle record: not JSON" in captured.err


def test_a_record_missing_a_field_exits_2_naming_it(cycle_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(document: Any) -> None:
        del document["snapshot"]["now"]

    edit_first(cycle_log, edit)
    assert main(["replay", str(cycle_log)]) == 2
    assert f"{cycle_log}:1: malformed cycle record: snapshot.now: is missing" in capsys.readouterr().err


def test_a_plugin_unknown_to_this_build_exits_2_naming_it(cycle_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(document: Any) -> None:
        document["weights"] = [["PreferredRunAffinity", 1], ["MostRecentlyUsed", 3]]

    edit_first(cycle_log, edit)
    assert main(["replay", str(cycle_log)]) == 2
    assert 'line 1: score plugin "MostRecentlyUsed" is not in this build' in capsys.readouterr().err


def test_a_filter_unknown_to_this_build_exits_2_naming_it(cycle_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(document: Any) -> None:
        document["filters"] = ["RuntimePodAvailability", "GpuTopology"]

    edit_first(cycle_log, edit)
    assert main(["replay", str(cycle_log)]) == 2
    assert 'line 1: filter plugin "GpuTopology" is not in this build' in capsys.readouterr().err


def test_logged_weights_are_used_when_replaying(cycle_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(document: Any) -> None:
        document["weights"] = [["PreferredRunAffinity", 3], ["LeastLoaded", 1]]

    edit_first(cycle_log, edit)
    # With affinity weighted 3, runtime-a (300 + 0) beats runtime-c (150 + 100).
    assert main(["replay", str(cycle_log)]) == 1
    out = capsys.readouterr().out
    assert re.search(r'plan\.pod +logged "runtime-c"\n +replay "runtime-a"\n', out)


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "absent.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err
