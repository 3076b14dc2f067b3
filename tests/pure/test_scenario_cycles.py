"""A scenario's ``cycles`` name the Runs to plan: ``namespace/name``, or a name in ``default``."""

from __future__ import annotations

import pytest
from returns.result import Failure

from kruntimes.pure.model.objects import RunKey
from kruntimes.pure.readers.scenario import ScenarioError, decode_scenario
from tests.builders import NOW


def test_a_cycle_names_a_run_by_its_key_or_by_a_name_in_the_default_namespace() -> None:
    scenario = decode_scenario([{"cycles": ["team-a/train", "train", "team-a/train"]}], "s.yaml", NOW).unwrap()
    assert scenario.cycles == (RunKey("team-a", "train"), RunKey("default", "train"), RunKey("team-a", "train"))
    assert [str(key) for key in scenario.cycles] == ["team-a/train", "default/train", "team-a/train"]


@pytest.mark.parametrize("text", ["team-a/", "/train", "/", "team-a/train/1", "team-a//train"])
def test_a_cycle_key_with_an_empty_or_an_extra_part_is_refused_naming_the_entry(text: str) -> None:
    result = decode_scenario([{"cycles": ["ok", text]}], "s.yaml", NOW)
    assert result == Failure(
        ScenarioError(
            "s.yaml",
            "cycles[1]",
            f"must be a Run key namespace/name (or a name in default), not {text!r}",
        )
    )
