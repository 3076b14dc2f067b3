"""One cycle's inputs, cut from the cluster state and the ledger at one instant.

Rule: a snapshot reads only what the Run's decision can depend on — the
Run's own (namespace, runtime) pods, the targets that match one of its own
affinity terms, its workspace and its namespace's reservations — so its cost
does not grow with unrelated Runs, pods or namespaces (SPEC §3.8, DESIGN
"Incremental state"). Everything is sorted by name so a logged snapshot
replays identically whatever the hash seed. This is a purely computational
module: ``now`` is an argument.
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import datetime
from itertools import chain
from operator import attrgetter
from typing import Final

from kruntimes.pure.cluster import ClusterState
from kruntimes.pure.ledger import Ledger, NamespaceBook, sync
from kruntimes.pure.model import (
    AffinityTerm,
    PodSlot,
    Run,
    RunKey,
    SchedulerConfig,
    Snapshot,
    Target,
)
from kruntimes.pure.plugins.affinity import label_matcher
from kruntimes.pure.resources import plus_reserved

_TARGET_ORDER: Final = attrgetter("pod", "run_uid", "assumed")
_POD_UID_ORDER: Final = attrgetter("pod", "run_uid")
_NAME: Final = attrgetter("name")


def take(
    state: ClusterState,
    ledger: Ledger,
    key: RunKey,
    now: datetime,
    config: SchedulerConfig,
    *,
    every_target: bool = False,
) -> Snapshot:
    """The snapshot for one dequeued Run key.

    Targets: every affinity term is decided by *which pods* host a matching
    target and whether any target matches at all (SPEC §4–§5: existence, never
    counts), so per distinct selector of the Run's terms the snapshot keeps one
    matching active Run per pod (the lowest uid), plus the matching
    reservations. A term matching thousands of Runs then costs one pass over
    them here and O(pods) in the plugins. ``every_target=True`` keeps every
    matching target (``explain`` counts them per pod); the plan is the same.

    The ledger's view of the namespace is synced first (SPEC §6), so overtaken
    reservations neither hold capacity nor count as targets here; the synced
    ledger itself is not returned — the caller swaps ``ledger.sync`` into its
    atom. A Run that is absent, not Pending or has no runtime gets no pods:
    the cycle ends before it would look at them.

    The candidate slots come ready-made from the state (sorted by name, actual
    usage included); only the pods holding reservations get another slot, which
    the ledger usually has ready too (see :func:`_pod_slots`).
    """
    run = state.run(key)
    synced = sync(ledger, state, key.namespace)
    reservation = None if run is None else synced.get(key.namespace, run.uid)
    if run is None or not run.status.pending or not run.runtime:
        return Snapshot(key, run, (), (), None, reservation, now, config)
    pods = _pod_slots(state, synced.book(key.namespace), key.namespace, run.runtime)
    workspace = None if run.workspace is None else state.workspace(key.namespace, run.workspace.name)
    return Snapshot(
        key=key,
        run=run,
        pods=pods,
        targets=_targets(state, synced, run, every_target),
        workspace=workspace,
        reservation=reservation,
        now=now,
        config=config,
    )


def _pod_name(slot: PodSlot) -> str:
    return slot.pod.name


def _pod_slots(state: ClusterState, book: NamespaceBook | None, namespace: str, runtime: str) -> tuple[PodSlot, ...]:
    """``state.pod_slots(namespace, runtime, reserved totals)``, from the ledger's book.

    A pod holding reservations gets ``PodSlot(pod, actual usage + reserved total)``;
    the book keeps that slot ready (``PodReservations.slot``), used as is while the
    state's slot still holds the very pod and usage objects it was derived from —
    else it is rebuilt here. Pods are found by bisecting the name-sorted slots, or
    through one name index when reservations cover a good part of the pods.
    """
    slots = state.pod_slots(namespace, runtime)
    if book is None or not slots:
        return slots
    loaded = [on_pod for on_pod in book.pods.values() if on_pod.total]
    if not loaded:
        return slots
    count = len(slots)
    # A name index costs ~1 step per pod, bisecting ~log2(pods) key calls per loaded pod.
    if count * 3 < len(loaded) * count.bit_length() * 2:
        index = dict(zip([slot.pod.name for slot in slots], range(count)))
        located = list(zip(map(index.get, map(_NAME, loaded)), loaded))
    else:
        located = []
        for on_pod in loaded:
            at = bisect_left(slots, on_pod.name, key=_pod_name)
            located.append((at if at < count and slots[at].pod.name == on_pod.name else None, on_pod))
    out = list(slots)
    for position, on_pod in located:
        if position is None:
            continue  # a pod of another runtime, or gone
        slot = out[position]
        if on_pod.slot is not None and slot.pod is on_pod.pod and slot.usage is on_pod.usage:
            out[position] = on_pod.slot
        else:
            out[position] = PodSlot(slot.pod, plus_reserved(slot.usage, on_pod.total))
    return tuple(out)


def _one_per_pod(targets: list[Target]) -> list[Target]:
    """The lowest-uid target on each pod (deterministic whatever the hash order)."""
    chosen: dict[str, Target] = {}
    get = chosen.get
    for target in targets:
        held = get(target.pod)
        if held is None or target.run_uid < held.run_uid:
            chosen[target.pod] = target
    return list(chosen.values())


def _targets(state: ClusterState, ledger: Ledger, run: Run, every_target: bool = False) -> tuple[Target, ...]:
    """Active Runs and reservations of the namespace matching any of the Run's terms
    (of the active ones, one per pod and selector unless ``every_target``; see :func:`take`).

    One entry per run uid: a Run both active and still reserved is counted
    once, as its active observation. The Run's own reservation is never a
    target (it would seed its own affinity).
    """
    terms: tuple[AffinityTerm, ...] = run.affinity.all_terms()
    if not terms:
        return ()
    found = [
        state.unsorted_matching_targets(run.namespace, selector)
        for selector in dict.fromkeys(term.selector for term in terms)
    ]
    if not every_target:
        found = [_one_per_pod(group) for group in found]
    # The same active Run is the same Target object in every index group, so
    # keying by identity first and by uid second loses nothing unless two
    # distinct targets share a uid; then keep the first in the documented order.
    distinct = {id(t): t for t in chain.from_iterable(found)}
    by_uid = {t.run_uid: t for t in distinct.values()}
    if len(by_uid) != len(distinct):
        by_uid = {}
        for group in found:
            for target in sorted(group, key=_POD_UID_ORDER):
                by_uid.setdefault(target.run_uid, target)
    matchers = [label_matcher(selector) for selector in dict.fromkeys(term.selector for term in terms)]
    for reservation in ledger.in_namespace(run.namespace):
        if reservation.run_uid == run.uid or reservation.run_uid in by_uid:
            continue
        labels = reservation.labels
        if any(matches(labels) for matches in matchers):
            by_uid[reservation.run_uid] = Target(
                pod=reservation.pod, labels=reservation.labels, run_uid=reservation.run_uid, assumed=True
            )
    return tuple(sorted(by_uid.values(), key=_TARGET_ORDER))
