"""The planning hot path's fast forms agree exactly with the plain definitions.

- ``PDict`` (the state's persistent map) behaves as a dict under any sequence of updates;
- every default filter's ``BatchFilter.select`` passes the same slots, in order, and counts
  the same reasons as calling the filter per slot;
- LeastLoaded's integer fast path gives the group starts of the exact rational keys;
- ``ClusterState.pod_slots`` (kept incrementally, with reservations overlaid) equals the
  slots built from scratch: pods sorted by name, usage = actual + reserved;
- ``PodScore`` keeps its keyword constructor and fields.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from kruntimes.pure.persistent.pdict import PDict, discard_in, empty, pdict, set_in, update_in
from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event, apply, from_objects
from kruntimes.pure.plugins.registry import DEFAULT_REGISTRY
from kruntimes.pure.model.objects import EMPTY_RESOURCES, PodSlot, Resources, Run, RuntimePod
from kruntimes.pure.model.plan import PodScore
from kruntimes.pure.framework.batch import BatchFilter
from kruntimes.pure.plugins.least_loaded import fast_group_starts, group_starts, runs_only_keys, scaled_keys
from kruntimes.pure.model.resources import add
from tests.builders import active_run, decoded_pod
from tests.pure.planning_world import slot
from tests.pure.test_plan_properties import World, worlds

# --- PDict ------------------------------------------------------------------------------------------

OPS = st.lists(st.tuples(st.booleans(), st.integers(0, 700), st.integers()), max_size=1500)


@given(OPS)
def test_pdict_behaves_as_a_dict_under_any_updates(ops: list[tuple[bool, int, int]]) -> None:
    reference: dict[int, int] = {}
    current: PDict[int, int] = empty()
    versions = [(current, dict(reference))]
    for put, key, value in ops:
        if put:
            reference[key] = value
            current = current.set(key, value)
        else:
            reference.pop(key, None)
            current = current.discard(key)
        versions.append((current, dict(reference)))
    for version, expected in versions[:: max(1, len(versions) // 20)] + [versions[-1]]:
        assert dict(version.items()) == expected, "older versions are untouched by later updates"
        assert len(version) == len(expected)
        assert all(version.get(k) == v and k in version for k, v in expected.items())
        assert sorted(version) == sorted(expected)
    assert current == pdict(reference)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.integers(0, 300)), max_size=800))
def test_nested_set_in_and_discard_in_keep_no_empty_inner_maps(ops: list[tuple[bool, int, int]]) -> None:
    reference: dict[int, set[int]] = {}
    current: PDict[int, PDict[int, int]] = empty()
    for put, key, name in ops:
        if put:
            reference.setdefault(key, set()).add(name)
            current = set_in(current, key, name, name)
        else:
            members = reference.get(key)
            if members is not None:
                members.discard(name)
                if not members:
                    del reference[key]
            current = discard_in(current, key, name)
    assert {k: set(v) for k, v in current.items()} == reference
    assert len(current) == len(reference)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.integers(0, 300)), max_size=800))
def test_update_in_replaces_removes_and_adds_inner_entries(ops: list[tuple[bool, int, int]]) -> None:
    """``update_in`` as the label index uses it: a counter per (key, name) that vanishes at 0."""
    reference: dict[int, dict[int, int]] = {}
    current: PDict[int, PDict[int, int]] = empty()
    for up, key, name in ops:
        step = 1 if up else -1

        def change(old: int | None, step: int = step) -> int | None:
            value = (old or 0) + step
            return value if value > 0 else None

        before = current
        current = update_in(current, key, name, change)
        value = reference.get(key, {}).get(name, 0) + step
        if value > 0:
            reference.setdefault(key, {})[name] = value
        elif name in reference.get(key, {}):
            del reference[key][name]
            if not reference[key]:
                del reference[key]
        else:
            assert current is before  # nothing to remove: the same map
    assert {k: dict(v.items()) for k, v in current.items()} == reference
    assert len(current) == len(reference)


# --- filters ------------------------------------------------------------------------------------------


@given(worlds())
def test_batch_select_agrees_with_the_per_slot_filter(world: World) -> None:
    snap = world.snapshot()
    for entry in DEFAULT_REGISTRY.filters:
        pod_filter = entry.plugin.prepare(world.run, snap).unwrap()
        if pod_filter is None:
            continue
        assert isinstance(pod_filter, BatchFilter)
        kept, counts = pod_filter.select(world.pods)
        verdicts = [(s, pod_filter(s)) for s in world.pods]
        assert kept == [s for s, reason in verdicts if reason is None]
        expected: dict[str, int] = {}
        for _, reason in verdicts:
            if reason is not None:
                expected[reason] = expected.get(reason, 0) + 1
        assert counts == expected


# --- LeastLoaded ------------------------------------------------------------------------------------------


@given(
    st.lists(st.tuples(st.integers(1, 9), st.integers(0, 12), st.booleans()), min_size=1, max_size=12),
    st.integers(1, 3),
)
def test_least_loaded_integer_keys_rank_exactly_like_rational_keys(
    pods: list[tuple[int, int, bool]], requested: int
) -> None:
    slots = tuple(
        slot(f"p{i}", {"runs": str(cap), **({"cpu": "0"} if zero_cpu else {})}, {"runs": used})
        for i, (cap, used, zero_cpu) in enumerate(pods)
    )
    request: Resources = {"runs": requested}
    fast = runs_only_keys(slots, request)
    assert fast is not None
    assert tuple(fast_group_starts(fast)) == group_starts(scaled_keys(slots, request))


def test_least_loaded_fast_path_declines_other_capacities() -> None:
    slots = (slot("a", {"runs": "2", "cpu": "2"}, {"runs": 1}), slot("b", {"runs": "2"}, {}))
    assert runs_only_keys(slots, {"runs": 1}) is None
    assert runs_only_keys(slots[1:], {"cpu": 1}) is None


# --- pod slots kept in the state ------------------------------------------------------------------------------


def _expected_slots(state: ClusterState, runtime: str, extra: Mapping[str, Resources]) -> tuple[PodSlot, ...]:
    pods = sorted((p for p in state.pods() if p.namespace == "default" and p.runtime == runtime), key=lambda p: p.name)
    return tuple(
        PodSlot(p, add(state.usage("default", p.name), extra.get(p.name, EMPTY_RESOURCES))) for p in pods
    )


POD_NAMES = [f"pod-{i:02d}" for i in range(0, 150, 7)]


@st.composite
def events(draw: st.DrawFn) -> list[Event]:
    out: list[Event] = []
    for _ in range(draw(st.integers(0, 60))):
        name = draw(st.sampled_from(POD_NAMES))
        kind = draw(st.sampled_from(["pod", "pod", "run", "run", "run"]))
        deleted = draw(st.integers(0, 5)) == 0
        obj: RuntimePod | Run
        if kind == "pod":
            runtime = draw(st.sampled_from(["python", "python", "node", None]))
            capacity = {"runs": str(draw(st.integers(1, 5)))}
            obj = decoded_pod(name, runtime=runtime, capacity=capacity, resource_version=str(len(out)))
        else:
            run_name = f"run-{draw(st.integers(0, 30))}"
            phase = draw(st.sampled_from(["Running", "Scheduled", "Succeeded", "Pending"]))
            requests = {"runs": str(draw(st.integers(1, 2)))}
            obj = active_run(run_name, name, phase=phase, requests=requests, resource_version=str(len(out)))
        out.append(Event("DELETED" if deleted else "MODIFIED", obj))
    return out


@given(events(), st.dictionaries(st.sampled_from(POD_NAMES), st.integers(0, 3), max_size=8))
def test_pod_slots_kept_incrementally_equal_slots_built_from_scratch(
    stream: list[Event], reserved: dict[str, int]
) -> None:
    state = EMPTY_STATE
    for event in stream:
        state = apply(state, event)
    extra: dict[str, Resources] = {pod: {"runs": n} for pod, n in reserved.items()}
    for runtime in ("python", "node"):
        assert state.pod_slots("default", runtime, extra) == _expected_slots(state, runtime, extra)
        assert state.pod_slots("default", runtime) == _expected_slots(state, runtime, {})
        # The derived int the filters read (left out of equality, so checked here).
        for kept in (*state.pod_slots("default", runtime, extra), *state.pod_slots("default", runtime)):
            assert kept.runs_used == kept.usage.get("runs", 0)
    rebuilt = from_objects([*state.pods(), *state.runs()])
    assert rebuilt == state
    assert rebuilt.pod_slots("default", "python", extra) == state.pod_slots("default", "python", extra)


def test_pod_groups_split_into_chunks_and_stay_sorted() -> None:
    state = EMPTY_STATE
    names = [f"p{(i * 37) % 500:03d}" for i in range(500)]
    for name in names:
        state = apply(state, Event("ADDED", decoded_pod(name)))
    assert [s.pod.name for s in state.pod_slots("default", "python")] == sorted(names)
    for name in names[::3]:
        state = apply(state, Event("DELETED", decoded_pod(name)))
    assert [s.pod.name for s in state.pod_slots("default", "python")] == sorted(set(names) - set(names[::3]))


def test_extra_usage_lands_on_its_own_pod_in_a_group_of_many_chunks() -> None:
    """A group of 200 pods, built at once (chunks of 32) and pod by pod (chunks split at 65),
    then with a block of names deleted (whole chunks emptied): extra usage for a few pods and
    for many lands on each pod's own slot, in every chunk; a name not in the group takes none."""
    names = [f"p{(i * 37) % 200:03d}" for i in range(200)]
    pods = [decoded_pod(name, capacity={"runs": "9"}) for name in names]
    one_by_one = EMPTY_STATE
    for pod in pods:
        one_by_one = apply(one_by_one, Event("ADDED", pod))
    few: dict[str, Resources] = {"p001": {"runs": 1}, "p150": {"runs": 2}, "p199": {"runs": 3}, "gone": {"runs": 1}}
    many: dict[str, Resources] = {name: {"runs": 1 + int(name[1:]) % 4} for name in sorted(names)[::3]}
    many["p100"] = {}  # nothing extra: the slot as it is
    states = [from_objects(pods), one_by_one]
    block = [pod for pod in pods if "p040" <= pod.name < "p120"]
    for state in list(states):
        for pod in block:
            state = apply(state, Event("DELETED", pod))
        states.append(state)
    for state in states:
        for extra in (few, many):
            assert state.pod_slots("default", "python", extra) == _expected_slots(state, "python", extra)
    assert len(states[-1].pod_slots("default", "python", few)) == 120


# --- PodScore ------------------------------------------------------------------------------------------------


def test_pod_score_keeps_its_fields_and_keyword_constructor() -> None:
    score = PodScore(pod="a", by_plugin=(("LeastLoaded", 100),), total=100)
    assert (score.pod, score.by_plugin, score.total) == ("a", (("LeastLoaded", 100),), 100)
    assert score == PodScore("a", (("LeastLoaded", 100),), 100)
    assert repr(score) == "PodScore(pod='a', by_plugin=(('LeastLoaded', 100),), total=100)"


@given(OPS)
def test_deep_pdict_tries_behave_as_dicts(ops: list[tuple[bool, int, int]]) -> None:
    """With tiny leaves every update walks the unrolled depth-1/2 paths and the loop below them."""
    import kruntimes.pure.persistent.pdict as module

    saved = module.LEAF_MAX
    module.LEAF_MAX = 2  # type: ignore[misc]
    try:
        reference: dict[int, int] = {}
        current: PDict[int, int] = empty()
        before = current
        for put, key, value in ops:
            if put:
                reference[key] = value
                current = current.set(key, value)
            else:
                reference.pop(key, None)
                current = current.discard(key)
        assert dict(current.items()) == reference
        assert len(current) == len(reference)
        assert all(current.get(k) == v for k, v in reference.items())
        assert before == empty(), "the first version is untouched"
        nested: PDict[int, PDict[int, int]] = empty()
        for put, key, value in ops:
            nested = set_in(nested, key % 7, key, value) if put else discard_in(nested, key % 7, key)
        assert all(len(inner) > 0 for inner in nested.values())
    finally:
        module.LEAF_MAX = saved  # type: ignore[misc]


def test_a_lazy_ranking_reads_and_compares_as_the_tuple_it_stands_for() -> None:
    from kruntimes.pure.model.plan import ScoreTable, ranked_views

    table = ScoreTable(["a", "b", "c"], ["LeastLoaded", "Preferred"], [(10, 50, 100), (0, 50, 0)], [10, 100, 100])
    ranking, scores = ranked_views(table)
    assert len(ranking) == 3 and len(scores) == 3
    assert ranking == ("b", "c", "a") and ("b", "c", "a") == ranking  # equal totals: name order
    assert list(ranking) == ["b", "c", "a"] and ranking[0] == "b" and ranking[1:] == ("c", "a")
    assert "c" in ranking and "z" not in ranking
    assert scores[0] == PodScore("b", (("LeastLoaded", 50), ("Preferred", 50)), 100)
    assert scores == tuple(scores) and hash(scores) == hash(tuple(scores))
    assert repr(ranking) == "('b', 'c', 'a')"
    assert ranking != ("a", "b", "c")
