"""The scheduler fails each invalid example of tests/run_examples.py with its reason and message
(the message the admission policy must answer too), and none of the valid ones (SPEC §2, §3.4–5)."""

from __future__ import annotations

import pytest

from kruntimes.pure.model.plan import Fail, Plan
from kruntimes.pure.readers.kube import decode_run
from tests.builders import run_json
from tests.pure.planning_world import plan, snapshot
from tests.run_examples import INVALID, VALID, Example


def planned(example: Example) -> Plan:
    body = run_json("r")
    body = {**body, "spec": {**example.spec, "runtime": "python"}}
    return plan(snapshot(decode_run(body).unwrap()))


@pytest.mark.parametrize("example", INVALID, ids=lambda e: e.name)
def test_the_scheduler_fails_each_invalid_example_with_its_reason_and_message(example: Example) -> None:
    assert planned(example) == Fail(str(example.reason), example.message)


@pytest.mark.parametrize("example", VALID, ids=lambda e: e.name)
def test_the_scheduler_fails_no_valid_example(example: Example) -> None:
    assert not isinstance(planned(example), Fail)
