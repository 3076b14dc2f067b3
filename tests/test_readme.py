"""The README's library example is code a user will paste: it must run and do what it says."""

from __future__ import annotations

import re
from pathlib import Path

from returns.result import Success

from kruntimes.pure import Bind, Registry, Wait
from kruntimes.pure.explain import explain
from kruntimes.pure.planner import plan_cycle
from tests.builders import decoded_run
from tests.pure.planning_world import slot, snapshot

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_readme_plugin_example_registers_and_steers_the_plan() -> None:
    (example,) = python_blocks()
    world = snapshot(
        decoded_run("r"),
        [slot("draining-a"), slot("runtime-long-name-b"), slot("c")],
    )
    namespace: dict[str, object] = {"snapshot": world}
    exec(compile(example, str(README), "exec", dont_inherit=True), namespace)  # as a user's module runs it
    result = namespace["plan"]
    assert isinstance(result, Success)
    plan = result.unwrap()
    # The custom filter rejects the draining pod; the weighted custom score favours the short name.
    assert isinstance(plan, Bind)
    assert plan.pod == "c"
    assert plan.scores[0].by_plugin[-1] == ("PreferShortNames", 100)
    assert dict(((p, r), n) for p, r, n in plan.rejections) == {("AvoidDraining", "PodDraining"): 1}


def test_readme_plugin_example_claims_the_pending_message_and_explains_its_rejections() -> None:
    (example,) = python_blocks()
    namespace: dict[str, object] = {"snapshot": snapshot(decoded_run("r"), [slot("c")])}
    exec(compile(example, str(README), "exec", dont_inherit=True), namespace)  # as a user's module runs it
    registry = namespace["registry"]
    assert isinstance(registry, Registry)
    world = snapshot(decoded_run("r"), [slot("draining-a"), slot("b", ready=False)])
    assert plan_cycle(world, registry).unwrap() == Wait(
        'waiting for runtime pods that are not draining for runtime "python"',
        (("RuntimePodAvailability", "RuntimePodUnavailable", 1), ("AvoidDraining", "PodDraining", 1)),
    )
    verdicts = {v.pod: (v.plugin, v.detail) for v in explain(world, registry).verdicts}
    assert verdicts["draining-a"] == ("AvoidDraining", "pod is draining")
