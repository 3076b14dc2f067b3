"""Cycle records: the exact round trip, and malformed lines as values, never exceptions."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from typing import Final, cast, get_args

from hypothesis import given
from hypothesis import strategies as st
from returns.pipeline import is_successful
from returns.result import Failure, Result, Success

from kruntimes.pure.readers.cyclelog import (
    CycleRecord,
    TruncatedRecord,
    decode_line,
    decode_record,
    diff_plans,
    encode_record,
    encode_truncated,
)
from kruntimes.pure.model.objects import (
    OPERATORS,
    TOPOLOGY_KEY,
    AffinityTerm,
    Condition,
    LabelSelector,
    Labels,
    Operator,
    PodSlot,
    Requirement,
    Reservation,
    Resources,
    Run,
    RunAffinity,
    RunKey,
    RunStatus,
    RuntimePod,
    SchedulerConfig,
    Snapshot,
    Target,
    WeightedTerm,
    Workspace,
    WorkspaceRef,
    frozen_labels,
    frozen_resources,
)
from kruntimes.pure.model.plan import (
    Bind,
    Cancel,
    CycleError,
    CycleErrorReason,
    Delay,
    Fail,
    Plan,
    PodScore,
    Skip,
    SkipWhy,
    Wait,
)
from kruntimes.pure.model.quantity import Amount, normalize

# --- strategies for the model records ------------------------------------------------------

texts: Final = st.text(max_size=6)
names: Final = st.text(min_size=1, max_size=8)
ints: Final = st.integers(min_value=-(10**20), max_value=10**20)


def _terminating(numerator: int, twos: int, fives: int) -> Amount:
    """A value with a finite decimal expansion, as every parsed quantity (and their sums) has."""
    return normalize(Fraction(numerator, 2**twos * 5**fives))


amounts: Final[st.SearchStrategy[Amount]] = st.one_of(
    st.integers(min_value=-(10**3), max_value=10**3),
    st.integers(min_value=-(10**130), max_value=10**130),
    st.builds(_terminating, ints, st.integers(0, 80), st.integers(0, 80)),
)
resources: Final[st.SearchStrategy[Resources]] = st.dictionaries(texts, amounts, max_size=3).map(frozen_resources)
labels: Final[st.SearchStrategy[Labels]] = st.dictionaries(texts, texts, max_size=3).map(frozen_labels)
zones: Final = st.sampled_from(
    [timezone.utc, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
)
times: Final[st.SearchStrategy[datetime]] = st.datetimes(
    min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30), timezones=zones
)
maybe_times: Final = st.none() | times
durations: Final[st.SearchStrategy[timedelta]] = st.timedeltas()

conditions: Final = st.builds(
    Condition,
    type=texts,
    status=st.sampled_from(["True", "False", "Unknown", ""]),
    reason=texts,
    message=texts,
    last_transition_time=maybe_times,
    last_probe_time=maybe_times,
)
operators: Final[st.SearchStrategy[Operator]] = st.sampled_from(sorted(OPERATORS)).map(lambda o: cast(Operator, o))
requirements: Final = st.builds(Requirement, key=texts, operator=operators, values=st.frozensets(texts, max_size=3))
selectors: Final = st.builds(LabelSelector, st.lists(requirements, max_size=3).map(tuple))
terms: Final = st.builds(AffinityTerm, selector=selectors, topology_key=st.just(TOPOLOGY_KEY) | texts)
weighted: Final = st.builds(WeightedTerm, weight=st.integers(-5, 200), term=terms)


affinities: Final = st.builds(
    RunAffinity,
    required=st.lists(terms, max_size=2).map(tuple),
    preferred=st.lists(weighted, max_size=2).map(tuple),
    anti_required=st.lists(terms, max_size=2).map(tuple),
    anti_preferred=st.lists(weighted, max_size=2).map(tuple),
)
statuses: Final = st.builds(
    RunStatus,
    phase=st.sampled_from(["", "Pending", "Scheduled", "Running", "Failed"]) | texts,
    assigned_pod=texts,
    assigned_pod_uid=texts,
    message=texts,
    attempt=ints,
    conditions=st.lists(conditions, max_size=3).map(tuple),
    completion_time=maybe_times,
)
runs: Final = st.builds(
    Run,
    namespace=names,
    name=names,
    uid=texts,
    resource_version=texts,
    creation_timestamp=maybe_times,
    labels=labels,
    runtime=texts,
    requests=resources,
    requests_error=st.none() | texts,
    affinity=affinities,
    affinity_error=st.none() | texts,
    workspace=st.none() | st.builds(WorkspaceRef, name=names, kind=texts, api_group=texts),
    cancel_requested=st.booleans(),
    retry_backoff=st.none() | durations,
    spec_error=st.none() | texts,
    status=statuses,
)
pods: Final = st.builds(
    RuntimePod,
    namespace=names,
    name=names,
    uid=texts,
    resource_version=texts,
    runtime=texts,
    phase=texts,
    deleting=st.booleans(),
    ready=st.booleans(),
    heartbeat_ok=st.booleans(),
    heartbeat_at=maybe_times,
    capacity=resources,
)
workspaces: Final = st.builds(
    Workspace,
    namespace=names,
    name=names,
    uid=texts,
    resource_version=texts,
    runtime=texts,
    mode=texts,
    phase=texts,
    bound_pod=texts,
)
reservations: Final = st.builds(
    Reservation,
    namespace=names,
    run_uid=texts,
    run_name=texts,
    resource_version=texts,
    pod=texts,
    pod_uid=texts,
    requests=resources,
    labels=labels,
)
targets: Final = st.builds(Target, pod=texts, labels=labels, run_uid=texts, assumed=st.booleans())
snapshots: Final = st.builds(
    Snapshot,
    key=st.builds(RunKey, texts, texts),
    run=st.none() | runs,
    pods=st.lists(st.builds(PodSlot, pods, resources), max_size=3).map(tuple),
    targets=st.lists(targets, max_size=3).map(tuple),
    workspace=st.none() | workspaces,
    reservation=st.none() | reservations,
    now=times,
    config=st.builds(SchedulerConfig, heartbeat_stale_after=durations),
)

finite: Final = st.floats(allow_nan=False, allow_infinity=False)
rejections: Final = st.lists(st.tuples(texts, texts, ints), max_size=3).map(tuple)
plans: Final[st.SearchStrategy[Plan]] = st.one_of(
    st.builds(
        Bind,
        pod=texts,
        pod_uid=texts,
        ranking=st.lists(texts, max_size=3).map(tuple),
        scores=st.lists(
            st.builds(PodScore, pod=texts, by_plugin=st.lists(st.tuples(texts, ints), max_size=3).map(tuple), total=ints),
            max_size=3,
        ).map(tuple),
        rejections=rejections,
    ),
    st.builds(Wait, message=texts, rejections=rejections, reason=texts),
    st.builds(Fail, reason=texts, message=texts),
    st.builds(Cancel, reason=texts, message=texts),
    st.builds(Delay, seconds=finite),
    st.builds(Skip, st.sampled_from(get_args(SkipWhy))),
)
cycle_errors: Final = st.builds(
    CycleError, reason=st.sampled_from(get_args(CycleErrorReason)), message=texts
)
results: Final[st.SearchStrategy[Result[Plan, CycleError]]] = st.one_of(
    plans.map(Success), cycle_errors.map(Failure)
)
records: Final = st.builds(
    CycleRecord,
    snapshot=snapshots,
    weights=st.lists(st.tuples(texts, ints), max_size=3).map(tuple),
    plan=results,
    filters=st.lists(texts, max_size=3).map(tuple),
)


# --- the round trip ------------------------------------------------------------------------------


@given(records)
def test_decoding_an_encoded_record_gives_the_same_record(record: CycleRecord) -> None:
    assert decode_record(encode_record(record)) == Success(record)


@given(records)
def test_an_encoded_record_is_one_line_of_sorted_ascii_json(record: CycleRecord) -> None:
    line = encode_record(record)
    assert "\n" not in line and line.isascii()
    assert json.dumps(json.loads(line), sort_keys=True, separators=(",", ":")) == line


@given(records)
def test_encoding_is_deterministic_and_a_fixed_point(record: CycleRecord) -> None:
    line = encode_record(record)
    assert encode_record(decode_record(line).unwrap()) == line


def test_sub_second_times_quantities_and_durations_keep_their_exact_values() -> None:
    record = _small_record()
    line = encode_record(record)
    assert '"now":"2026-01-01T00:00:00.000001Z"' in line
    assert '"heartbeat_stale_after":"1500ms"' in line
    assert '"capacity":{"cpu":"0.125","runs":"4"}' in line
    assert decode_record(line) == Success(record)


def test_plans_that_differ_are_diffed_field_by_field_with_names() -> None:
    bind = _bind("runtime-c", 150)
    paths = {d.path for d in diff_plans(Success(bind), Success(_bind("runtime-a", 100)))}
    assert {"plan.pod", "plan.pod_uid", "plan.ranking", "plan.scores[runtime-c]"} <= paths
    (score,) = diff_plans(Success(bind), Success(_bind("runtime-c", 90)))[:1]
    assert (score.path, score.logged, score.replayed) == ("plan.scores[runtime-c].LeastLoaded", "150", "90")
    assert diff_plans(Success(bind), Success(bind)) == ()
    kinds = diff_plans(Success(bind), Success(Wait("waiting", ())))
    assert kinds[0].path == "plan.action" and kinds[0].logged == '"Bind"'


# --- malformed lines ---------------------------------------------------------------------------------

json_values: Final = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@given(st.text(max_size=200))
def test_arbitrary_text_is_a_failure_not_an_exception(text: str) -> None:
    assert not is_successful(decode_record(text))


@given(records, st.data())
def test_a_record_with_any_one_value_replaced_never_raises(record: CycleRecord, data: st.DataObject) -> None:
    document = json.loads(encode_record(record))
    node: object = document
    # Walk down a random path, then replace the value found there with random JSON.
    while True:
        children: list[tuple[object, object]]
        if isinstance(node, dict) and node:
            children = [(node, key) for key in sorted(node)]
        elif isinstance(node, list) and node:
            children = [(node, index) for index in range(len(node))]
        else:
            break
        parent, key = data.draw(st.sampled_from(children))
        child = parent[key]  # type: ignore[index]
        if not isinstance(child, (dict, list)) or not child or data.draw(st.booleans()):
            parent[key] = data.draw(json_values)  # type: ignore[index]
            break
        node = child
    result = decode_record(json.dumps(document))
    if is_successful(result):  # the replacement happened to be valid
        assert isinstance(result.unwrap(), CycleRecord)


def test_malformed_lines_say_where_and_why() -> None:
    line = encode_record(_small_record())
    assert "not JSON" in str(decode_record(line[:-5]).failure())
    assert "not JSON" in str(decode_record("").failure())
    assert str(decode_record("[1, 2]").failure()) == "must be an object, not a list"
    bad_quantity = line.replace('"cpu":"0.125"', '"cpu":"1Gi"')
    assert str(decode_record(bad_quantity).failure()).startswith("snapshot.pods[0].pod.capacity.cpu:")
    missing = json.loads(line)
    del missing["snapshot"]["run"]["status"]["attempt"]
    error = decode_record(json.dumps(missing)).failure()
    assert (error.reason, error.path) == ("MissingField", "snapshot.run.status.attempt")
    future = line.replace('"v":1', '"v":99')
    assert "unsupported record format 99" in str(decode_record(future).failure())
    assert "action" in str(decode_record(line.replace('"action":"Bind"', '"action":"Dance"')).failure())
    assert not is_successful(decode_record("[" * 100_000))


def test_numbers_past_a_float_or_pythons_digits_are_failures_naming_the_field() -> None:
    document = json.loads(encode_record(_small_record()))
    document["plan"] = {"action": "Delay", "seconds": 10**400}  # an integer no float holds
    error = decode_record(json.dumps(document)).failure()
    assert str(error) == "plan.seconds: must be a number a float can hold, not a number of 30 digits or more"
    line = encode_record(_small_record()).replace('"v":1', '"v":' + "9" * 5000)  # more digits than int() converts
    assert str(decode_record(line).failure()) == "v: must be an integer, not a number of 5000 digits"


# --- helpers --------------------------------------------------------------------------------------------


def _bind(pod: str, total: int) -> Bind:
    return Bind(
        pod=pod,
        pod_uid=f"uid-{pod}",
        ranking=(pod, "runtime-b"),
        scores=(PodScore(pod, (("LeastLoaded", total),), total), PodScore("runtime-b", (("LeastLoaded", 0),), 0)),
        rejections=(("RunAffinity", "UnsatisfiedRunAffinity", 1),),
    )


def _small_record() -> CycleRecord:
    now = datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc)
    run = Run(
        namespace="default",
        name="run-a",
        uid="u1",
        resource_version="7",
        creation_timestamp=now - timedelta(minutes=1),
        labels=frozen_labels({"zone": "blue"}),
        runtime="python",
        requests=frozen_resources({"runs": 1}),
        requests_error=None,
        affinity=RunAffinity(
            preferred=(WeightedTerm(1, AffinityTerm(LabelSelector((Requirement("zone", "In", frozenset({"blue"})),)))),)
        ),
        affinity_error=None,
        workspace=None,
        cancel_requested=False,
        retry_backoff=timedelta(seconds=2),
        spec_error=None,
        status=RunStatus(attempt=2, conditions=(Condition("Running", "False", last_transition_time=now),)),
    )
    pod = RuntimePod(
        namespace="default",
        name="runtime-c",
        uid="p1",
        resource_version="3",
        runtime="python",
        phase="Running",
        deleting=False,
        ready=True,
        heartbeat_ok=True,
        heartbeat_at=now,
        capacity=frozen_resources({"runs": 4, "cpu": Fraction(1, 8)}),
    )
    snapshot = Snapshot(
        key=run.key,
        run=run,
        pods=(PodSlot(pod, frozen_resources({"runs": 1})),),
        targets=(Target("runtime-c", frozen_labels({"zone": "blue"}), "u0"),),
        workspace=None,
        reservation=None,
        now=now,
        config=SchedulerConfig(heartbeat_stale_after=timedelta(milliseconds=1500)),
    )
    weights = (("PreferredRunAffinity", 1), ("LeastLoaded", 1))
    return CycleRecord(snapshot, weights, Success(_bind("runtime-c", 150)), ("RuntimePodAvailability",))


# --- records too large for the log ---------------------------------------------------------------


@given(records, st.integers(0, 1 << 40))
def test_a_truncation_marker_names_the_cycle_and_the_size_and_is_read_back_as_one(record: CycleRecord, size: int) -> None:
    line = encode_truncated(record, size)
    assert "\n" not in line and line.isascii()
    action = "Error" if isinstance(record.plan, Failure) else json.loads(encode_record(record))["plan"]["action"]
    assert decode_line(line) == Success(TruncatedRecord(record.snapshot.key, action, size))
    assert decode_line(encode_record(record)) == Success(record)
    refused = decode_record(line)
    assert not is_successful(refused) and "too large for the log" in str(refused.failure())


def test_a_truncation_marker_stays_small_for_the_longest_names_kubernetes_allows() -> None:
    record = _small_record()
    longest = CycleRecord(
        snapshot=Snapshot(RunKey("n" * 63, "r" * 253), None, (), (), None, None, record.snapshot.now, record.snapshot.config),
        weights=record.weights,
        plan=record.plan,
    )
    assert len(encode_truncated(longest, 1 << 62)) < 512


def test_a_malformed_truncation_marker_is_a_value_naming_the_field() -> None:
    good = json.loads(encode_truncated(_small_record(), 10))
    good["truncated"]["bytes"] = -1
    assert str(decode_line(json.dumps(good)).failure()) == "truncated.bytes: must not be negative"
    del good["truncated"]["key"]
    assert str(decode_line(json.dumps(good)).failure()).startswith("truncated.key")
