"""Worlds at the scale of placement without a scan: hypothesis strategies for the SPEC oracle.

The load index (``kruntimes.pure.placement``) decides a cycle only from
``MIN_PODS`` candidate pods up, which the worlds of :mod:`tests.pure.ranking_world`
never reach. These have ``MIN_PODS`` to about three times as many, and are built as
the informers build the state — a first list, then watch events — so the index's
units and chunks are exercised, and every plan is still compared with
:func:`tests.pure.spec_oracle.plan_by_spec`:

- pods come in *blocks* of consecutive names sharing capacity, health and usage: a
  load class holds tens of pods (LeastLoaded ties among them, so the name decides),
  and a stale block fills whole chunks of the index while other chunks stay fresh (the
  planner skips those);
- *odd pods* (stale by 1 µs, exactly at the bound, not ready, heartbeat false, …) are
  named between two pods of a block, so a fresh chunk holds one pod to judge alone;
- after the list, blocks of pods are deleted (whole chunks emptied) or thinned, pods
  are added (chunks split), and heartbeats arrive or move earlier;
- reservations sit on several pods of one load class (a unit of reserved pods), live,
  overtaken or made for a former pod of the name; active Runs load the first pods of
  a block and carry labels, so their pods host targets (judged alone when the Run has
  terms), some bound to a former pod of the name or to a deleted pod;
- sometimes a workspace, bound to a kept pod, to a deleted one, or in any other case
  of :data:`tests.pure.ranking_world.WORKSPACE_CASES`.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from hypothesis import strategies as st

from kruntimes.pure.model.objects import DEFAULT_CONFIG, Object, Reservation, RuntimePod, SchedulerConfig
from kruntimes.pure.placement import MIN_PODS
from kruntimes.pure.state.cluster import Event
from tests.builders import NOW, Json, affinity_json, decoded_pod, decoded_run, term
from tests.pure.ranking_world import (
    ELSEWHERE,
    HEALTHS,
    LABELS,
    NAMESPACE,
    POD_UIDS,
    RUNTIME,
    TARGET_LABELS,
    TERMS,
    WEIGHTS,
    WORKSPACE_CASES,
    World,
    _pod,
    _pod_uid,
    _requests,
    _workspace,
    capacity_profiles,
    weighted,
)

__all__ = ["large_worlds", "renamed"]

FATES = ("kept", "deleted", "thinned", "added", "beat")
"""What happens to a block after the first list: nothing; every pod deleted; every
other pod deleted; added only after the list; listed in another health, then modified."""


def renamed(prototype: RuntimePod, name: str) -> RuntimePod:
    """``prototype`` under another name (and the uid the builders derive from it)."""
    return dataclasses.replace(prototype, name=name, uid=f"uid-pod-{NAMESPACE}-{name}")


def _name(pod: RuntimePod) -> str:
    return pod.name


@st.composite
def large_worlds(draw: st.DrawFn) -> World:
    """A world of ``MIN_PODS`` or more candidate pods, reached through a list and events."""
    notes: set[str] = set()
    config = draw(
        st.sampled_from([DEFAULT_CONFIG] * 3 + [SchedulerConfig(timedelta(0)), SchedulerConfig(timedelta(seconds=30))])
    )
    profiles = draw(st.lists(capacity_profiles(), min_size=1, max_size=3))
    prototypes: dict[tuple[int, str], RuntimePod] = {}

    def pod(name: str, profile: int, health: str) -> RuntimePod:
        key = (profile, health)
        if key not in prototypes:
            prototypes[key] = _pod("proto", profiles[profile], health)
        return renamed(prototypes[key], name)

    listed: list[RuntimePod] = []
    final: list[RuntimePod] = []
    deleted: list[RuntimePod] = []
    added: list[RuntimePod] = []
    modified: list[RuntimePod] = []
    blocks: list[tuple[str, tuple[RuntimePod, ...]]] = []
    """(fate, final pods) of each block that has pods after the events."""
    counter = 0

    def block(fate: str, size: int, health: str) -> None:
        nonlocal counter
        prefix = draw(weighted("p", "A", "z", times=6))
        profile = draw(st.integers(0, len(profiles) - 1))
        names = [f"{prefix}{n:04d}" for n in range(counter, counter + size)]
        counter += size
        pods = tuple(pod(name, profile, health) for name in names)
        if fate == "added":
            added.extend(pods)
        else:
            before = pods
            if fate == "beat":
                earlier = st.sampled_from(["ok", "stale", "heartbeat-false"])
                before = tuple(pod(name, profile, draw(earlier)) for name in names)
                modified.extend(pods)
            listed.extend(before)
        gone = pods if fate == "deleted" else pods[1::2] if fate == "thinned" else ()
        deleted.extend(gone)
        kept = tuple(p for p in pods if p not in gone)
        final.extend(kept)
        if kept:
            blocks.append((fate, kept))
        notes.add(f"block {fate}")

    for _ in range(draw(st.integers(2, 6))):
        fate = draw(weighted("kept", *FATES[1:], times=4))
        size = draw(st.sampled_from([64, 96]) if fate == "deleted" else st.sampled_from([1, 4, 16, 32, 48, 64]))
        block(fate, size, draw(weighted("ok", "stale", *HEALTHS, times=10)))
    if len(final) < MIN_PODS:
        block(draw(st.sampled_from(["kept", "kept", "added"])), MIN_PODS - len(final) + draw(st.sampled_from([0, 7, 60])), "ok")

    # Odd pods, named right after a pod of a block: one pod to judge alone in a fresh chunk.
    for neighbour in draw(st.lists(st.sampled_from(final), max_size=4, unique_by=_name)):
        odd = pod(f"{neighbour.name}~", draw(st.integers(0, len(profiles) - 1)), draw(st.sampled_from(HEALTHS)))
        (added if draw(st.booleans()) else listed).append(odd)
        final.append(odd)
        notes.add("odd pod")

    # Active Runs on the first pods of some blocks (their usage and labels), one a pod.
    runs: list[Object] = []
    target_labels: list[tuple[str, str]] = []
    candidates = blocks + ([("deleted", tuple(deleted))] if deleted else [])
    for fate, pods in draw(st.lists(st.sampled_from(candidates), max_size=3)):
        labels = draw(TARGET_LABELS)
        requests = _requests(draw, gpu_odds=6)
        bound_to = draw(st.sampled_from(POD_UIDS))
        phase = draw(st.sampled_from(["Running", "Running", "Scheduled", "Ready", "Succeeded"]))
        for on in pods[: draw(st.sampled_from([1, 2, 5, 8]))]:
            runs.append(
                decoded_run(
                    f"a{len(runs)}",
                    labels=labels,
                    requests=requests,
                    phase=phase,
                    assigned_pod=on.name,
                    assigned_pod_uid=_pod_uid(on.name, bound_to),
                )
            )
        target_labels.extend(sorted(labels.items()))
        notes.add(f"active runs on a {fate} block")

    # Reservations on several pods of one block (one load class unless Runs load them).
    reservations: list[Reservation] = []
    for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):
        _, pods = draw(st.sampled_from(blocks))
        chosen = draw(st.lists(st.sampled_from(pods), min_size=1, max_size=5, unique_by=_name))
        requests = _requests(draw, gpu_odds=8)
        labels = draw(TARGET_LABELS)
        for reserved in chosen:
            kind = draw(weighted("live", "newer-version", "gone", "assigned", times=9))
            made_for = draw(weighted("now", "former", times=9))
            i = len(reservations)
            pending = decoded_run(f"q{i:03d}", labels=labels, requests=requests)
            if kind == "newer-version":
                runs.append(decoded_run(pending.name, labels=labels, requests=requests, resource_version="2"))
            elif kind == "assigned":
                runs.append(
                    decoded_run(
                        pending.name, labels=labels, requests=requests, phase="Scheduled",
                        assigned_pod=reserved.name, resource_version="2",
                    )
                )
            elif kind == "live":
                runs.append(pending)
            notes.add(f"reservation {kind} for {made_for} pod uid")
            reservations.append(
                Reservation(
                    namespace=NAMESPACE,
                    run_uid=pending.uid,
                    run_name=pending.name,
                    resource_version=pending.resource_version,
                    pod=reserved.name,
                    pod_uid=_pod_uid(reserved.name, made_for),
                    requests=pending.requests,
                    labels=pending.labels,
                )
            )

    # The Run to plan: most have no terms (every pod of a class is alike for them).
    labels = draw(LABELS)
    required: list[Json] = []
    anti_required: list[Json] = []
    preferred: list[tuple[int, Json]] = []
    if draw(st.booleans()):
        for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):
            if bool(target_labels) and draw(st.booleans()):
                required.append(term(dict([draw(st.sampled_from(target_labels))])))
            elif bool(labels) and draw(st.booleans()):
                key = draw(st.sampled_from(sorted(labels)))
                required.append(term({key: labels[key]}))  # seedable while no target matches
            else:
                required.append(draw(st.sampled_from(TERMS)))
        if draw(st.booleans()):
            anti_required.append(
                term(dict([draw(st.sampled_from(target_labels))])) if target_labels else draw(st.sampled_from(TERMS))
            )
        preferred = draw(st.lists(st.tuples(WEIGHTS, st.sampled_from(TERMS)), max_size=2))
        notes.add("affinity terms")
    affinity = affinity_json(required=required, preferred=preferred, anti_required=anti_required)
    workspace_case: str | None = draw(weighted(None, *WORKSPACE_CASES, times=20))
    run = decoded_run(
        "r", labels=labels, requests=_requests(draw, gpu_odds=12), affinity=affinity,
        workspace=None if workspace_case is None else "ws",
    )
    extra: list[Object] = [run, decoded_pod(ELSEWHERE, runtime="node")]
    if workspace_case is not None:
        on_deleted = bool(deleted) and draw(st.booleans())
        bound = draw(st.sampled_from(deleted if on_deleted else final)).name
        notes.add(f"workspace {workspace_case}" + (" on a deleted pod" if on_deleted else ""))
        workspace = _workspace(workspace_case, bound)
        if workspace is not None:
            extra.append(workspace)

    # The watch events after the list, a block's worth at a time in a drawn order.
    batches: list[list[Event]] = [
        [Event("DELETED", p) for p in deleted],
        [Event("ADDED", p) for p in added],
        [Event("MODIFIED", p) for p in modified],
    ]
    events = tuple(e for batch in draw(st.permutations(batches)) for e in batch)
    objects = (*final, *runs, *extra)
    first_list = (*listed, *runs, *extra)
    return World(run, tuple(objects), tuple(reservations), config, NOW, frozenset(notes), first_list, events)
