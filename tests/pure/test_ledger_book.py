"""The ledger's per-namespace book (kept incrementally) equals what it replaced, computed afresh.

The book holds, beside the reservations, what every snapshot reads of them: the
reservations by run uid, each pod's reserved total, the pod's slot with that
total added (reused while the state's slot holds the same objects), and the Run
object ``reserve`` validated (sync's identity fast path). These properties pin
each of those to the plain definition after any sequence of reserves, releases,
observations, syncs and state changes (heartbeats, usage changes, pods replaced,
Runs reset), with fractional requests so exact arithmetic is exercised too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from functools import reduce

from hypothesis import given, settings
from hypothesis import strategies as st

from kruntimes.pure.state.cluster import EMPTY_STATE, ClusterState, Event, apply
from kruntimes.pure.model.objects import Object
from kruntimes.pure.ledger import (
    EMPTY_LEDGER,
    Ledger,
    NamespaceBook,
    observe,
    release,
    reserve,
    reserved_totals,
    reserved_usage,
    sync,
)
from kruntimes.pure.model.objects import DEFAULT_CONFIG, Reservation, Run, RunKey, frozen_resources
from kruntimes.pure.model.quantity import Amount
from kruntimes.pure.snapshot import pod_slot, take
from tests.conftest import examples
from tests.builders import NOW, active_run, decoded_pod, decoded_run

NS = "default"
PODS = ("p0", "p1", "p2", "p3")
REQUESTS: tuple[dict[str, object], ...] = (
    {"runs": "1"},
    {"runs": "1", "cpu": "500m"},
    {"cpu": "250m"},
    {"runs": "2", "cpu": "1"},
    {},
)
PENDING = tuple(f"r{i}" for i in range(8))


def _pending(i: int, version: str = "1") -> Run:
    return decoded_run(PENDING[i], requests=REQUESTS[i % len(REQUESTS)], resource_version=version)


def _world() -> ClusterState:
    objects: list[Object] = [decoded_pod(name, capacity={"runs": "20", "cpu": "20"}) for name in PODS]
    objects += [_pending(i) for i in range(len(PENDING))]
    objects.append(decoded_run("planned", requests={"runs": "1"}))
    return reduce(lambda state, obj: apply(state, Event("ADDED", obj)), objects, EMPTY_STATE)


def fresh_totals(ledger: Ledger, namespace: str, state: ClusterState | None = None) -> dict[str, dict[str, Amount]]:
    """The reserved totals summed from scratch (the definition ``reserved_totals`` had); with
    ``state``, only what holds the pods there: reservations made for the uid their pod has now."""
    totals: dict[str, dict[str, Amount]] = {}
    for reservation in ledger.in_namespace(namespace):
        if state is not None:
            pod = state.pod(namespace, reservation.pod)
            if pod is None or pod.uid != reservation.pod_uid:
                continue
        total = totals.setdefault(reservation.pod, {})
        for name, amount in reservation.requests.items():
            total[name] = total.get(name, 0) + amount
    return totals


def _typed(mapping: Mapping[str, Amount]) -> dict[str, tuple[type, Amount]]:
    return {name: (type(amount), amount) for name, amount in mapping.items()}


def _still_unobserved(reservation: Reservation, run: Run | None) -> bool:
    return (
        run is not None
        and run.name == reservation.run_name
        and run.status.pending  # a stale assignedPod on a Pending Run is no assignment (SPEC §1)
        and run.resource_version == reservation.resource_version
    )


def _check(state: ClusterState, ledger: Ledger) -> None:
    book = ledger.book(NS)
    reservations = ledger.in_namespace(NS)
    # The derived book equals the one derived from the reservations alone.
    assert ledger == Ledger(ledger._by_namespace)
    assert [r.run_uid for r in reservations] == sorted(r.run_uid for r in reservations)
    if book is None:
        assert not reservations
    else:
        scratch = NamespaceBook.of(book.reservations)
        assert book == scratch and book.ordered == scratch.ordered
        def on_pods(of: NamespaceBook) -> dict[str, list[str]]:
            return {name: sorted(r.run_uid for r in on.reservations) for name, on in of.pods.items()}

        assert on_pods(book) == on_pods(scratch)
        assert {n: _typed(p.total) for n, p in book.pods.items()} == {n: _typed(p.total) for n, p in scratch.pods.items()}
    fresh = fresh_totals(ledger, NS)
    assert {pod: _typed(t) for pod, t in reserved_totals(ledger, NS).items()} == {
        pod: _typed(t) for pod, t in fresh.items()
    }
    held = fresh_totals(ledger, NS, state)
    for pod in PODS:
        expected = {k: v for k, v in fresh.get(pod, {}).items() if v}
        assert _typed(reserved_usage(ledger, NS, pod)) == _typed(frozen_resources(expected))
        on_pod = state.pod(NS, pod)
        if on_pod is not None:
            expected = {k: v for k, v in held.get(pod, {}).items() if v}
            assert _typed(reserved_usage(ledger, NS, pod, on_pod.uid)) == _typed(frozen_resources(expected))
    # sync: the identity fast path keeps exactly what the plain predicate keeps.
    synced = sync(ledger, state, NS)
    kept = {r.run_uid for r in reservations if _still_unobserved(r, state.run_by_uid(NS, r.run_uid))}
    assert {r.run_uid for r in synced.in_namespace(NS)} == kept
    # take: the slots equal the state's own overlay of the freshly summed totals of what
    # holds each pod (a reservation made for a replaced pod holds nothing on the new one).
    snapshot = take(state, synced, RunKey(NS, "planned"), NOW, DEFAULT_CONFIG)
    expected_slots = state.pod_slots(NS, "python", fresh_totals(synced, NS, state))
    assert snapshot.pods == expected_slots
    assert [_typed(s.usage) for s in snapshot.pods] == [_typed(s.usage) for s in expected_slots]
    assert [list(s.usage) for s in snapshot.pods] == [list(s.usage) for s in expected_slots]


OPS = st.lists(
    st.tuples(
        st.sampled_from(("reserve", "release", "observe", "sync", "heartbeat", "charge", "replace_pod", "reset")),
        st.integers(0, len(PENDING) - 1),
        st.integers(0, len(PODS) - 1),
    ),
    max_size=40,
)


@settings(max_examples=examples(150), deadline=None)
@given(OPS)
def test_the_book_and_the_snapshot_slots_equal_their_fresh_definitions(ops: list[tuple[str, int, int]]) -> None:
    state = _world()
    ledger = EMPTY_LEDGER
    version = 1
    for op, i, j in ops:
        version += 1
        run = state.run(RunKey(NS, PENDING[i]))
        pod = PODS[j]
        if op == "reserve" and run is not None:
            current = state.pod(NS, pod)
            assert current is not None
            result = reserve(ledger, state, run, pod, current.uid, NOW, DEFAULT_CONFIG)
            ledger = result.value_or(ledger)
        elif op == "release" and run is not None:
            ledger = release(ledger, NS, run.uid)
        elif op == "observe" and run is not None:
            current = state.pod(NS, pod)
            assert current is not None
            bound = active_run(
                run.name, pod, requests=REQUESTS[i % len(REQUESTS)], resource_version=str(version), pod_uid=current.uid if i % 2 else ""
            )
            state = apply(state, Event("MODIFIED", bound))
            ledger = observe(ledger, bound)
        elif op == "sync":
            ledger = sync(ledger, state, NS)
        elif op == "heartbeat":
            current = state.pod(NS, pod)
            assert current is not None
            beat = replace(current, resource_version=str(version), heartbeat_at=NOW - timedelta(seconds=version % 5))
            state = apply(state, Event("MODIFIED", beat))
        elif op == "charge":
            current = state.pod(NS, pod)
            assert current is not None
            other = active_run(f"active-{version}", pod, requests={"runs": "1", "cpu": "125m"}, pod_uid=current.uid if i % 2 else "")
            state = apply(state, Event("ADDED", other))
        elif op == "replace_pod":  # by a new pod, or back to the first (a relist after a missed delete)
            uid = f"uid-pod-{NS}-{pod}" if i % 2 else f"uid-{version}"
            state = apply(state, Event("MODIFIED", decoded_pod(pod, capacity={"runs": "20"}, uid=uid)))
        elif op == "reset":
            state = apply(state, Event("MODIFIED", _pending(i, str(version))))
        _check(state, ledger)


def test_a_ledger_built_from_reservations_alone_plans_like_one_built_by_reserve() -> None:
    state = _world()
    ledger = EMPTY_LEDGER
    for i, pod in ((0, "p0"), (1, "p0"), (2, "p1"), (3, "p2")):
        run = state.run(RunKey(NS, PENDING[i]))
        assert run is not None
        ledger = reserve(ledger, state, run, pod, f"uid-pod-{NS}-{pod}", NOW, DEFAULT_CONFIG).unwrap()
    rebuilt = Ledger(ledger._by_namespace)  # as simulation.initial_ledger builds one: no slots, no Runs seen
    assert rebuilt == ledger
    key = RunKey(NS, "planned")
    assert take(state, rebuilt, key, NOW, DEFAULT_CONFIG) == take(state, ledger, key, NOW, DEFAULT_CONFIG)
    assert release(release(ledger, NS, "nope"), NS, "nope") is ledger


@settings(max_examples=examples(60), deadline=None)
@given(st.sets(st.integers(0, 63), max_size=40), st.sampled_from(["kept", "gone", "replaced"]))
def test_a_snapshot_finds_the_reserved_pods_of_a_large_group_however_many_there_are(
    reserved: set[int], first_pod: str
) -> None:
    """Few reserved pods are found by bisection, an eighth or more through a name index:
    either way the slots, and one pod's slot read alone (an admission's), are the state's
    with the reserved totals."""
    names = [f"pod-{i:02d}" for i in range(64)]
    objects: list[Object] = [decoded_pod(name, capacity={"runs": "4", "cpu": "4"}) for name in names]
    runs = [decoded_run(f"w{i}", requests=REQUESTS[i % len(REQUESTS)]) for i in sorted(reserved)]
    planned = decoded_run("planned", requests={"runs": "1"})
    state = reduce(lambda s, obj: apply(s, Event("ADDED", obj)), [*objects, *runs, planned], EMPTY_STATE)
    ledger = EMPTY_LEDGER
    for run, i in zip(runs, sorted(reserved)):
        ledger = reserve(ledger, state, run, names[i], f"uid-pod-{NS}-{names[i]}", NOW, DEFAULT_CONFIG).unwrap()
    if first_pod != "kept" and reserved:  # a reservation on a pod that is no longer there
        gone = state.pod(NS, names[min(reserved)])
        assert gone is not None
        if first_pod == "gone":
            state = apply(state, Event("DELETED", gone))
        else:  # replaced under its name: the reservation holds nothing on the new pod
            state = apply(state, Event("MODIFIED", replace(gone, uid="uid-new", resource_version="2")))
    snapshot = take(state, ledger, RunKey(NS, "planned"), NOW, DEFAULT_CONFIG)
    expected = state.pod_slots(NS, "python", fresh_totals(ledger, NS, state))
    assert snapshot.pods == expected
    assert [_typed(s.usage) for s in snapshot.pods] == [_typed(s.usage) for s in expected]
    for slot in expected:
        alone = pod_slot(state, ledger, NS, "python", slot.pod.name)
        assert alone == slot and alone is not None and _typed(alone.usage) == _typed(slot.usage)
    assert pod_slot(state, ledger, NS, "python", "pod-missing") is None
    assert pod_slot(state, ledger, NS, "ruby", expected[0].pod.name) is None
