"""What-if scheduling as data (``simulate``): a scenario's cycles run in order, each on the
world the earlier ones wrote, exactly as a worker would run them (SPEC §8, §12).

The command's output is tested in ``tests/commands``; here the :class:`Simulation` value
itself: the steps, the binds, the cycle log records, and the cluster and ledger it ends with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.ledger import EMPTY_LEDGER
from kruntimes.pure.model.objects import (
    DEFAULT_CONFIG,
    EMPTY_LABELS,
    Object,
    Reservation,
    Run,
    RunKey,
    SchedulerConfig,
)
from kruntimes.pure.model.plan import Bind, Plan, Skip, Wait
from kruntimes.pure.model.objects import frozen_resources
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.readers.cyclelog import CycleRecord
from kruntimes.pure.readers.scenario import Scenario
from kruntimes.pure.simulation import Simulation, default_cycles, initial_ledger, simulate
from tests.builders import NOW, at, decoded_pod, decoded_run, world
from tests.pure.test_framework import FixedScore, registry_with


def scenario(
    *objects: Object,
    cycles: Sequence[RunKey] | None = None,
    reservations: Sequence[Reservation] = (),
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> Scenario:
    return Scenario(NOW, config, tuple(objects), tuple(reservations), None if cycles is None else tuple(cycles))


def plans(simulation: Simulation) -> list[Plan]:
    return [step.plan.unwrap() for step in simulation.steps]


def kinds(simulation: Simulation) -> list[str]:
    return [type(plan).__name__ for plan in plans(simulation)]


def final_run(simulation: Simulation, name: str, namespace: str = "default") -> Run:
    run = simulation.state.run(RunKey(namespace, name))
    assert run is not None
    return run


def key(name: str, namespace: str = "default") -> RunKey:
    return RunKey(namespace, name)


def reservation(name: str, pod: str, namespace: str = "default", resource_version: str = "1") -> Reservation:
    return Reservation(
        namespace,
        f"uid-run-{namespace}-{name}",
        name,
        resource_version,
        pod,
        f"uid-pod-{namespace}-{pod}",
        frozen_resources({"runs": 1}),
        EMPTY_LABELS,
    )


# --- the loop -----------------------------------------------------------------------------------


def test_each_cycle_sees_the_binds_before_it_and_the_end_state_shows_them_observed() -> None:
    sim = simulate(
        scenario(
            decoded_pod("runtime-a", capacity={"runs": "2"}),
            decoded_run("run-0", created=at(-30)),
            decoded_run("run-1", created=at(-20)),
            decoded_run("run-2", created=at(-10)),
        )
    )
    assert sim.now == NOW
    assert [step.key for step in sim.steps] == [key("run-0"), key("run-1"), key("run-2")]
    assert kinds(sim) == ["Bind", "Bind", "Wait"]
    assert sim.assignments == ((key("run-0"), "runtime-a"), (key("run-1"), "runtime-a"))
    # The state is the informer's view after every write: the binds assigned, the Wait still Pending.
    assert [(final_run(sim, n).status.phase, final_run(sim, n).status.assigned_pod) for n in ("run-0", "run-1")] == [
        ("Scheduled", "runtime-a"),
        ("Scheduled", "runtime-a"),
    ]
    assert final_run(sim, "run-2").status.pending and final_run(sim, "run-2").status.assigned_pod == ""
    assert sim.state.usage("default", "runtime-a") == {"runs": 2}
    # Each bind's reservation handed off to the usage once its write was observed.
    assert len(sim.ledger) == 0


def test_named_cycles_run_in_order_and_one_that_writes_nothing_does_not_end_the_loop() -> None:
    sim = simulate(
        scenario(
            decoded_pod("runtime-a", capacity={"runs": "5"}),
            decoded_run("run-a", created=at(-10)),
            decoded_run("run-b", created=at(-20)),
            cycles=[key("ghost"), key("run-a"), key("run-a"), key("run-b")],
        )
    )
    assert [step.key for step in sim.steps] == [key("ghost"), key("run-a"), key("run-a"), key("run-b")]
    assert plans(sim)[0] == Skip("not found") and plans(sim)[2] == Skip("not pending")
    assert [step.write is None for step in sim.steps] == [True, False, True, False]
    assert sim.assignments == ((key("run-a"), "runtime-a"), (key("run-b"), "runtime-a"))


def test_without_named_cycles_every_pending_run_is_planned_once_oldest_first() -> None:
    objects = (
        decoded_pod("runtime-a", capacity={"runs": "10"}),
        decoded_run("zulu", created=at(-300)),
        decoded_run("alpha", created=at(-100)),
        decoded_run("tie-b", created=at(-200)),
        decoded_run("tie-a", created=at(-200)),
        decoded_run("tie-a", namespace="aaa", created=at(-200)),
        decoded_run("done", created=at(-999), phase="Succeeded"),
    )
    expected = [key("zulu"), key("tie-a", "aaa"), key("tie-a"), key("tie-b"), key("alpha")]
    assert list(default_cycles(world(*objects))) == expected
    sim = simulate(scenario(*objects))
    assert [step.key for step in sim.steps] == expected
    assert kinds(sim) == ["Bind", "Wait", "Bind", "Bind", "Bind"]  # no runtime pod in "aaa"


def test_a_wait_is_written_but_binds_nothing() -> None:
    sim = simulate(scenario(decoded_pod("runtime-a", ready=False), decoded_run("run-a")))
    assert kinds(sim) == ["Wait"]
    assert sim.steps[0].write is not None
    assert sim.assignments == ()
    written = final_run(sim, "run-a")
    assert written.status.pending and written.resource_version == "2"
    wait = plans(sim)[0]
    assert isinstance(wait, Wait) and written.status.message == wait.message


def test_the_scenario_config_and_registry_are_the_ones_each_cycle_runs_with() -> None:
    # A heartbeat 20 s old: stale under the default 15 s, fresh under 30 s.
    objects = (decoded_pod("runtime-a", heartbeat_at=at(-20)), decoded_run("run-a"))
    assert kinds(simulate(scenario(*objects))) == ["Wait"]
    relaxed = SchedulerConfig(heartbeat_stale_after=timedelta(seconds=30))
    registry = registry_with(FixedScore(7))
    sim = simulate(scenario(*objects, config=relaxed), registry)
    assert kinds(sim) == ["Bind"]
    bind = plans(sim)[0]
    assert isinstance(bind, Bind)
    assert bind.scores[0].by_plugin == (("PreferredRunAffinity", 0), ("LeastLoaded", 100), ("Fixed", 7))
    # The cycle log record: what `kruntimes replay` plans again, with that registry's plugins.
    assert sim.records == (
        CycleRecord(
            sim.steps[0].snapshot,
            (("PreferredRunAffinity", 1), ("LeastLoaded", 1), ("Fixed", 1)),
            sim.steps[0].plan,
            ("RuntimePodAvailability", "RunAffinity", "WorkspacePlacement"),
        ),
    )
    assert sim.steps[0].snapshot.config == relaxed and sim.steps[0].snapshot.now == NOW


def test_one_record_per_cycle_in_cycle_order() -> None:
    sim = simulate(
        scenario(
            decoded_pod("runtime-a", capacity={"runs": "1"}),
            decoded_run("run-a", created=at(-20)),
            decoded_run("run-b", created=at(-10)),
            cycles=[key("run-b"), key("ghost"), key("run-a")],
        )
    )
    assert [(record.snapshot.key, record.plan) for record in sim.records] == [
        (step.key, step.plan) for step in sim.steps
    ]
    assert [record.snapshot.key for record in sim.records] == [key("run-b"), key("ghost"), key("run-a")]
    assert all(record.weights == DEFAULT_REGISTRY.weights for record in sim.records)


# --- reservations ----------------------------------------------------------------------------------


def test_the_initial_ledger_holds_exactly_the_scenario_reservations_by_namespace_and_run() -> None:
    a = reservation("run-a", "runtime-a")
    b = reservation("run-b", "runtime-b")
    other = reservation("run-a", "runtime-a", namespace="team")
    replaced = reservation("run-b", "runtime-c")  # the same Run again: the later one holds
    ledger = initial_ledger([a, b, other, replaced])
    assert len(ledger) == 3
    assert ledger.get("default", a.run_uid) == a
    assert ledger.get("default", b.run_uid) == replaced
    assert ledger.get("team", other.run_uid) == other
    assert ledger.in_namespace("team") == (other,)
    assert initial_ledger([]) == EMPTY_LEDGER


def test_a_scenario_reservation_holds_its_room_and_stays_while_unobserved() -> None:
    objects = (
        decoded_pod("runtime-a", capacity={"runs": "1"}),
        decoded_run("assumed", created=at(-20)),
        decoded_run("next", created=at(-10)),
    )
    held = reservation("assumed", "runtime-a")
    sim = simulate(scenario(*objects, reservations=[held], cycles=[key("next")]))
    assert kinds(sim) == ["Wait"]
    assert sim.ledger.get("default", held.run_uid) == held
    # Without it the room is free.
    assert kinds(simulate(scenario(*objects, cycles=[key("next")]))) == ["Bind"]


# --- the versions the writes get ------------------------------------------------------------------

_VERSION = re.compile(r"[0-9]{1,20}")


def first_write_version(versions: Sequence[str]) -> str:
    """The version the simulation's first write gets, with ``versions`` on other objects."""
    objects: list[Object] = [decoded_pod("runtime-a"), decoded_run("run-a")]
    objects += [decoded_pod(f"other-{i}", runtime="other", resource_version=v) for i, v in enumerate(versions)]
    sim = simulate(scenario(*objects))
    assert kinds(sim) == ["Bind"]
    return final_run(sim, "run-a").resource_version


def test_each_write_gets_a_fresh_increasing_version_above_every_version_in_the_scenario() -> None:
    sim = simulate(
        scenario(
            decoded_pod("runtime-a", capacity={"runs": "2"}, resource_version="7"),
            decoded_run("run-0", created=at(-30), resource_version="12"),
            decoded_run("run-1", created=at(-20), resource_version="3"),
            decoded_run("run-2", created=at(-10), resource_version="4"),
        )
    )
    assert kinds(sim) == ["Bind", "Bind", "Wait"]
    assert [final_run(sim, n).resource_version for n in ("run-0", "run-1", "run-2")] == ["13", "14", "15"]


def test_a_version_that_is_not_an_ascii_number_of_at_most_20_digits_is_not_counted() -> None:
    assert first_write_version(["abc", "", "-5", "4.0"]) == "2"  # run-a and the pod are at "1"
    assert first_write_version(["9" * 20]) == str(10**20)
    assert first_write_version(["1" + "0" * 20, "5"]) == "6"
    assert first_write_version(["\u0669\u0669", "5"]) == "6"  # Arabic-Indic 99: a digit, not ASCII
    assert first_write_version(["007"]) == "8"


def test_with_no_numeric_version_the_first_write_is_version_1() -> None:
    objects = (decoded_pod("runtime-a", resource_version="a"), decoded_run("run-a", resource_version="b"))
    assert final_run(simulate(scenario(*objects)), "run-a").resource_version == "1"


@given(st.lists(st.text(alphabet="0123456789\u0669\u0660\u00b2x", max_size=22), max_size=4))
def test_the_first_write_is_one_above_the_greatest_counted_version(versions: list[str]) -> None:
    counted = [int(v) for v in versions + ["1", "1"] if _VERSION.fullmatch(v)]
    assert first_write_version(versions) == str(max(counted) + 1)


def test_a_simulation_with_no_cycles_writes_nothing() -> None:
    objects = (decoded_pod("runtime-a"), decoded_run("run-a"))
    sim = simulate(scenario(*objects, cycles=[]))
    assert (sim.steps, sim.assignments, sim.records) == ((), (), ())
    assert sim.state == world(*objects) and sim.ledger == EMPTY_LEDGER
