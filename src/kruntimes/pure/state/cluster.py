"""The cluster as one persistent value, updated in O(log n) per watch event.

Rule: every index is keyed by namespace, and ``apply`` only touches the entries
the event's old and new object contribute to, so a scheduling cycle pays for its
own namespace and runtime, never for the size of the cluster (docs/architecture.md,
"Cluster state and the ledger"). Indexes kept here:

- runs by ``RunKey``; run keys by namespace, then uid;
- Runtime Pods by ``(namespace, name)``, and by ``(namespace, runtime)`` as the
  candidate *pod slots* (pod + actual usage) sorted by name, in chunks of at
  most 64, so that a snapshot gets them as one tuple without looking usage up
  per pod, and a heartbeat or a usage change rewrites one chunk, not the group
  (a pod without a ``runtime`` label is not stored);
- workspaces by ``(namespace, name)``;
- Pending run keys by ``(namespace, spec.runtime)`` (for wakeups, SPEC §8);
- actual usage by ``(namespace, pod)``: the sum of the requests of the active Runs
  *on that pod* (SPEC §1: a Run bound with an ``assignedPodUID`` counts only while the
  pod of that name has that uid), kept incrementally (retract the old contribution, add
  the new), and the active Runs bound with a uid by ``(namespace, pod)``, so that a pod
  that goes, comes back or is replaced under its name turns exactly its Runs off or on;
- active affinity targets (on their pod, as above) per namespace by run name, with a label index
  ``(namespace, key, value) -> pod -> targets`` (the targets on each pod sorted by
  uid) and, per ``(namespace, key)``, the values present (for ``Exists``), so that
  ``matches_by_pod`` starts from the most selective positive requirement of a
  selector and a one-requirement selector's hosting pods are the keys of one map
  (a snapshot then costs O(pods hosting a match), not O(matching Runs)). The value
  sets change only when a value appears or disappears, so a Run starting or
  finishing updates one label map per label, not two.

Every map is a :class:`~kruntimes.pure.persistent.pdict.PDict` (a hash trie of small
dicts, path-copied on update): dict-speed lookups and iteration, and an update
allocates only small objects, so the cyclic collector never walks a big index
per event (docs/performance.md). This is a purely computational module with no
side effects; the effect layer holds the current value in an atom and swaps in
``apply``'s result.

One module at about 1,050 lines: ``ClusterState``'s indexes and ``apply``, which keeps every one of
them consistent per event, must change together; splitting the indexes from the update would
separate each invariant from the code that keeps it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate, chain
from operator import attrgetter
from types import MappingProxyType
from typing import Final, Literal, TypeAlias, TypeVar

from kruntimes.pure.model.objects import Object
from kruntimes.pure.persistent.pdict import PDict, discard_in, pdict, set_in, update_in
from kruntimes.pure.model.objects import (
    EMPTY_LABELS,
    LoadClass,
    load_class_of,
    NEVER_US,
    EMPTY_RESOURCES,
    RUNS_RESOURCE,
    LabelSelector,
    PodSlot,
    Requirement,
    Resources,
    Run,
    RunKey,
    RuntimePod,
    Target,
    Workspace,
    frozen_resources,
)
from kruntimes.pure.model.quantity import Amount
from kruntimes.pure.model.resources import add, plus_reserved, subtract

EventType: TypeAlias = Literal["ADDED", "MODIFIED", "DELETED"]

_NsName: TypeAlias = tuple[str, str]
"""``(namespace, name)``; also ``(namespace, uid)`` and ``(namespace, runtime)``."""
_LabelKey: TypeAlias = tuple[str, str, str]
"""``(namespace, label key, label value)``."""
_K = TypeVar("_K")
_V = TypeVar("_V")
_N = TypeVar("_N")
_ResourceOp: TypeAlias = Callable[[Resources, Resources], Resources]

_by_target_order: Final = attrgetter("pod", "run_uid")
_UID: Final = attrgetter("run_uid")

OnPods: TypeAlias = "PDict[str, tuple[Target, ...]] | dict[str, tuple[Target, ...]]"
"""pod name -> the matching targets on that pod, sorted by run uid (never empty)."""


@dataclass(frozen=True, slots=True)
class Event:
    """One watch event, decoded. For ``DELETED`` the object is the last state seen."""

    type: EventType
    obj: Object


# --- the candidate slots of one (namespace, runtime) ------------------------------------

_CHUNK: Final = 64
"""Most slots per chunk: a slot update copies one chunk and the chunk tuple."""


NO_PROBE: Final = 1 << 62
"""The probe minimum of a chunk with no pod that may ever be available."""
NAIVE_PROBE: Final = NEVER_US + 1
"""The probe minimum of a chunk holding a pod with a naive ``lastProbeTime``: below every
cutoff, so the planner always looks at that chunk's pods one by one."""


def _probe_min(chunk: tuple[PodSlot, ...]) -> int:
    """The earliest heartbeat (µs) among the chunk's pods that may be available."""
    low = NO_PROBE
    for slot in chunk:
        probe = slot.pod.available_probe_us
        if probe is None:
            return NAIVE_PROBE
        if probe != NEVER_US and probe < low:
            low = probe
    return low


def _with_name(names: tuple[str, ...] | None, name: str) -> tuple[str, ...]:
    if not names:
        return (name,)
    at = bisect_left(names, name)
    return names[:at] + (name,) + names[at:]


def _reclass(
    classes: PDict[LoadClass, tuple[str, ...]], name: str, old: LoadClass | None, new: LoadClass | None
) -> PDict[LoadClass, tuple[str, ...]]:
    """``classes`` with ``name`` moved from class ``old`` to class ``new`` (either may be ``None``)."""
    if old == new:
        return classes
    if old is not None:
        names = classes.get(old)
        if names is not None:
            at = bisect_left(names, name)
            if at < len(names) and names[at] == name:
                names = names[:at] + names[at + 1 :]
                classes = classes.set(old, names) if names else classes.discard(old)
    if new is not None:
        classes = classes.set(new, _with_name(classes.get(new), name))
    return classes


class _PodGroup:
    """The pod slots of one (namespace, runtime), sorted by pod name, in chunks, with
    the load index the planner reads instead of every slot (docs/architecture.md,
    "Placement without a scan"): the pod names per load class, and per chunk the
    earliest heartbeat, so the pods a cycle must look at one by one (stale ones)
    are found by chunk.

    Immutable: ``put``/``remove`` return a new group sharing untouched chunks.
    """

    __slots__ = ("firsts", "names", "chunks", "count", "classes", "probe_mins")

    firsts: tuple[str, ...]
    """The first pod name of each chunk (for bisect)."""
    names: tuple[tuple[str, ...], ...]
    chunks: tuple[tuple[PodSlot, ...], ...]
    count: int
    classes: PDict[LoadClass, tuple[str, ...]]
    """load class -> the names of its pods, sorted (never empty)."""
    probe_mins: tuple[int, ...]
    """Per chunk, :func:`_probe_min`."""

    def __init__(
        self,
        firsts: tuple[str, ...],
        names: tuple[tuple[str, ...], ...],
        chunks: tuple[tuple[PodSlot, ...], ...],
        count: int,
        classes: PDict[LoadClass, tuple[str, ...]],
        probe_mins: tuple[int, ...],
    ) -> None:
        self.firsts, self.names, self.chunks, self.count = firsts, names, chunks, count
        self.classes, self.probe_mins = classes, probe_mins

    @staticmethod
    def of(slots: Iterable[PodSlot]) -> _PodGroup:
        ordered = sorted(slots, key=_slot_name)
        chunks = tuple(tuple(ordered[i : i + _CHUNK // 2]) for i in range(0, len(ordered), _CHUNK // 2))
        names = tuple(tuple(s.pod.name for s in chunk) for chunk in chunks)
        by_class: dict[LoadClass, list[str]] = {}
        for slot in ordered:
            by_class.setdefault(slot.load_class, []).append(slot.pod.name)
        classes = pdict({key: tuple(held) for key, held in by_class.items()})
        return _PodGroup(
            tuple(n[0] for n in names), names, chunks, len(ordered), classes, tuple(map(_probe_min, chunks))
        )

    def slots(self) -> tuple[PodSlot, ...]:
        chunks = self.chunks
        if len(chunks) == 1:
            return chunks[0]
        return tuple(chain.from_iterable(chunks))

    def positions(self) -> Iterator[tuple[str, int]]:
        """``(pod name, index in slots())`` for every pod."""
        starts = accumulate(map(len, self.chunks), initial=0)
        for names, start in zip(self.names, starts):
            yield from zip(names, range(start, start + len(names)))

    def _locate(self, name: str) -> tuple[int, int] | None:
        """(chunk, position in it) of pod ``name``, or ``None``; two bisections."""
        j = bisect_right(self.firsts, name) - 1
        if j < 0:
            return None
        names = self.names[j]
        i = bisect_left(names, name)
        if i == len(names) or names[i] != name:
            return None
        return j, i

    def index_of(self, name: str) -> int | None:
        """The position of ``name`` in :meth:`slots`, or ``None``."""
        found = self._locate(name)
        return None if found is None else sum(map(len, self.chunks[: found[0]])) + found[1]

    def positions_by_name(self) -> dict[str, int]:
        """Pod name -> its position in :meth:`slots`, for every pod (built in C)."""
        return dict(zip(chain.from_iterable(self.names), range(self.count)))

    def located(self, names: Iterable[str]) -> list[tuple[int, PodSlot] | None]:
        """For each name, its position in :meth:`slots` and its slot (``None``: not here);
        two bisections a name, the chunk offsets summed once."""
        chunks, firsts, all_names = self.chunks, self.firsts, self.names
        offsets = list(accumulate(map(len, chunks), initial=0))
        out: list[tuple[int, PodSlot] | None] = []
        for name in names:
            j = bisect_right(firsts, name) - 1
            if j < 0:
                out.append(None)
                continue
            chunk_names = all_names[j]
            i = bisect_left(chunk_names, name)
            out.append((offsets[j] + i, chunks[j][i]) if i < len(chunk_names) and chunk_names[i] == name else None)
        return out

    def slot(self, name: str) -> PodSlot | None:
        """The slot of pod ``name``, or ``None``; two bisections."""
        found = self._locate(name)
        return None if found is None else self.chunks[found[0]][found[1]]

    def put(self, slot: PodSlot) -> _PodGroup:
        """With ``slot`` added or replacing the slot of its pod (a group is never empty:
        ``apply`` builds one with :meth:`of` for a runtime's first pod)."""
        name = slot.pod.name
        chunks, names, firsts = self.chunks, self.names, self.firsts
        j = max(bisect_right(firsts, name) - 1, 0)
        chunk, chunk_names = chunks[j], names[j]
        i = bisect_left(chunk_names, name)
        probe_mins = self.probe_mins
        if i < len(chunk_names) and chunk_names[i] == name:
            # A heartbeat or a usage change: one slot replaced (list round trips are
            # the cheapest tuple copies). A heartbeat keeps the load class, and it only
            # moves the probe later: the chunk's minimum is recomputed only when the
            # pod held it.
            before = chunk[i]
            slots = list(chunk)
            slots[i] = slot
            replaced = list(chunks)
            replaced[j] = new_chunk = tuple(slots)
            low = probe_mins[j]
            old_probe, new_probe = before.pod.available_probe_us, slot.pod.available_probe_us
            if old_probe is None or new_probe is None or old_probe <= low or new_probe < low:
                mins = list(probe_mins)
                mins[j] = _probe_min(new_chunk)
                probe_mins = tuple(mins)
            classes = _reclass(self.classes, name, before.load_class, slot.load_class)  # as is when equal
            return _PodGroup(firsts, names, tuple(replaced), self.count, classes, probe_mins)
        chunk = chunk[:i] + (slot,) + chunk[i:]
        chunk_names = chunk_names[:i] + (name,) + chunk_names[i:]
        if len(chunk) <= _CHUNK:
            new_chunks: tuple[tuple[PodSlot, ...], ...] = (chunk,)
            new_names: tuple[tuple[str, ...], ...] = (chunk_names,)
        else:
            half = len(chunk) // 2
            new_chunks = (chunk[:half], chunk[half:])
            new_names = (chunk_names[:half], chunk_names[half:])
        names = names[:j] + new_names + names[j + 1 :]
        return _PodGroup(
            tuple(n[0] for n in names),
            names,
            chunks[:j] + new_chunks + chunks[j + 1 :],
            self.count + 1,
            _reclass(self.classes, name, None, slot.load_class),
            probe_mins[:j] + tuple(map(_probe_min, new_chunks)) + probe_mins[j + 1 :],
        )

    def remove(self, name: str) -> _PodGroup | None:
        """Without pod ``name``, which the group holds (``apply`` removes a pod it stored
        only from the group of its runtime); ``None`` when the group empties."""
        if self.count == 1:
            return None
        j = bisect_right(self.firsts, name) - 1
        chunk, chunk_names = self.chunks[j], self.names[j]
        i = bisect_left(chunk_names, name)
        classes = _reclass(self.classes, name, chunk[i].load_class, None)
        chunk = chunk[:i] + chunk[i + 1 :]
        chunk_names = chunk_names[:i] + chunk_names[i + 1 :]
        probe_mins = self.probe_mins
        if chunk:
            chunks = self.chunks[:j] + (chunk,) + self.chunks[j + 1 :]
            names = self.names[:j] + (chunk_names,) + self.names[j + 1 :]
            probe_mins = probe_mins[:j] + (_probe_min(chunk),) + probe_mins[j + 1 :]
        else:
            chunks = self.chunks[:j] + self.chunks[j + 1 :]
            names = self.names[:j] + self.names[j + 1 :]
            probe_mins = probe_mins[:j] + probe_mins[j + 1 :]
        return _PodGroup(tuple(n[0] for n in names), names, chunks, self.count - 1, classes, probe_mins)


PodIndex: TypeAlias = _PodGroup
"""The candidate slots of one (namespace, runtime) with their load index (read-only)."""


def _slot_name(slot: PodSlot) -> str:
    return slot.pod.name


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Persistent indexes over the Runs, Runtime Pods and workspaces the informers saw.

    Build with :func:`from_objects` or :data:`EMPTY_STATE` and :func:`apply`;
    the fields are private to this module.
    """

    _runs: PDict[RunKey, Run]
    _run_keys_by_uid: PDict[str, PDict[str, RunKey]]
    """namespace -> uid -> run key (nested: no ``(namespace, uid)`` tuple per Run)."""
    _pods: PDict[_NsName, RuntimePod]
    _workspaces: PDict[_NsName, Workspace]
    _pending: PDict[_NsName, PDict[RunKey, RunKey]]
    """(namespace, workspace name) -> the Pending Runs that name that workspace. Only those: a
    Run without a workspace costs this index nothing, however long the backlog."""
    _usage: PDict[_NsName, Resources]
    _targets: PDict[str, PDict[str, Target]]
    """namespace -> run name -> the active Run as a target."""
    _by_label: PDict[_LabelKey, PDict[str, tuple[Target, ...]]]
    """(namespace, key, value) -> pod -> the targets on it with that label, sorted by
    uid: the targets themselves, so a lookup never goes back through the namespace-wide
    map, grouped by pod, so the pods hosting a match are the keys."""
    _label_values: PDict[_NsName, PDict[str, str]] = field(compare=False)
    """(namespace, key) -> the values that key takes among the namespace's targets
    (value -> value); derived from ``_by_label``, so left out of equality."""
    _groups: PDict[_NsName, _PodGroup] = field(compare=False)
    """(namespace, runtime) -> the candidate slots; derived from ``_pods`` and
    ``_usage`` (so left out of equality)."""
    _bound: PDict[_NsName, PDict[str, str]] = field(compare=False)
    """(namespace, pod name) -> run name -> the ``assignedPodUID`` of every active Run bound
    there with one, on that pod or not: what a pod's appearance, disappearance or new uid
    turns on or off (derived from ``_runs``, so left out of equality)."""

    # --- reads -------------------------------------------------------------------

    def run(self, key: RunKey) -> Run | None:
        return self._runs.get(key)

    def run_by_uid(self, namespace: str, uid: str) -> Run | None:
        keys = self._run_keys_by_uid.get(namespace)
        if keys is None:
            return None
        key = keys.get(uid)
        return None if key is None else self._runs.get(key)

    def pod(self, namespace: str, name: str) -> RuntimePod | None:
        return self._pods.get((namespace, name))

    def pods_of(self, namespace: str, runtime: str) -> tuple[RuntimePod, ...]:
        """The Runtime Pods labelled ``runtime=<runtime>`` in the namespace, in any order."""
        group = self._groups.get((namespace, runtime))
        return () if group is None else tuple(slot.pod for slot in group.slots())

    def pod_slots(
        self, namespace: str, runtime: str, extra_usage: Mapping[str, Resources] | None = None
    ) -> tuple[PodSlot, ...]:
        """The Runtime Pods of ``(namespace, runtime)`` sorted by name, each with its usage.

        Usage is the active Runs' requests on the pod, plus ``extra_usage[pod]``
        when given (the ledger's reservations). O(pods) at C speed plus
        O(len(extra_usage)): the slots are kept ready in the state.
        """
        group = self._groups.get((namespace, runtime))
        if group is None:
            return ()
        slots = group.slots()
        if not extra_usage:
            return slots
        changed = [(name, extra) for name, extra in extra_usage.items() if extra]
        if not changed:
            return slots
        out = list(slots)
        if len(changed) * 32 < group.count:
            located = [(group.index_of(name), extra) for name, extra in changed]
        else:
            extras = dict(changed)
            located = [(index, extras[name]) for name, index in group.positions() if name in extras]
        for index, extra in located:
            if index is not None:
                slot = out[index]
                out[index] = PodSlot(slot.pod, plus_reserved(slot.usage, extra))
        return tuple(out)

    def load_index(self, namespace: str, runtime: str) -> _PodGroup | None:
        """The candidate group of ``(namespace, runtime)`` with its load index (for the
        planner's placement without a scan), or ``None`` when there is no pod."""
        return self._groups.get((namespace, runtime))

    def workspace(self, namespace: str, name: str) -> Workspace | None:
        return self._workspaces.get((namespace, name))

    def usage(self, namespace: str, pod: str) -> Resources:
        """The requests of the active Runs on that pod (known or not; a Run bound to another
        pod of that name counts nothing, SPEC §1); no zero entries."""
        usage = self._usage.get((namespace, pod))
        return EMPTY_RESOURCES if usage is None else usage

    def places(self, run: Run) -> bool:
        """Whether ``run`` counts on its pod here: active, on the pod of that name with the uid
        it was bound to (or bound by name alone). SPEC §1."""
        return _places(run, self._pods)

    def bound_to(self, namespace: str, pod: str) -> tuple[tuple[str, str], ...]:
        """The active Runs bound to pod name ``pod`` with an ``assignedPodUID`` (on the pod
        now there or not), as ``(run name, that uid)`` in any order."""
        bound = self._bound.get((namespace, pod))
        return () if bound is None else tuple(bound.items())

    def pending_naming(self, namespace: str, workspace: str) -> frozenset[RunKey]:
        """Pending Runs of ``namespace`` whose ``spec.workspace`` names ``workspace``: one index
        lookup (what a workspace's change wakes, SPEC §8)."""
        keys = self._pending.get((namespace, workspace))
        return frozenset() if keys is None else frozenset(keys)

    def matching_targets(self, namespace: str, selector: LabelSelector) -> tuple[Target, ...]:
        """Active Runs of the namespace whose labels ``selector`` matches, as targets.

        Sorted by pod, then run uid, so the result does not depend on hash order;
        found as :meth:`matches_by_pod` finds them.
        """
        matched = self.unsorted_matching_targets(namespace, selector)
        matched.sort(key=_by_target_order)
        return tuple(matched)

    def unsorted_matching_targets(self, namespace: str, selector: LabelSelector) -> list[Target]:
        """:meth:`matching_targets` in hash order (for callers that sort anyway)."""
        return list(chain.from_iterable(self.matches_by_pod(namespace, selector).values()))

    def matches_by_pod(self, namespace: str, selector: LabelSelector, *, first_only: bool = False) -> OnPods:
        """The namespace's active Runs that ``selector`` matches, grouped by pod: pod ->
        its matching targets sorted by uid (so the first is the lowest uid).

        Candidates come from the positive requirement (``In``: union over its values;
        ``Exists``: every value of the key) covering the fewest pods, so Runs whose
        labels no requirement names are never looked at; a selector of one
        requirement with one value is answered by one index entry, as it stands.
        Only a selector made solely of ``NotIn``/``DoesNotExist`` scans the
        namespace's targets, which it must: every unlabelled Run matches it.
        ``first_only``: the caller reads only each pod's first target, so a pod's
        scan may stop at its first match (the answer may then hold more per pod).
        Do not mutate the result.
        """
        targets = self._targets.get(namespace)
        if targets is None:
            return {}
        best: list[PDict[str, tuple[Target, ...]]] | None = None
        best_requirement: Requirement | None = None
        best_size = 0
        for requirement in selector.requirements:
            if requirement.operator == "In":
                values: Iterable[str] = requirement.values
            elif requirement.operator == "Exists":
                values = self._label_values.get((namespace, requirement.key)) or ()
            else:
                continue
            sets = []
            for value in values:
                found = self._by_label.get((namespace, requirement.key, value))
                if found is not None:
                    sets.append(found)
            size = sum(map(len, sets))
            if best is None or size < best_size:
                best, best_size, best_requirement = sets, size, requirement
                if size == 0:
                    return {}
        matches = selector.matches
        if best is None:
            grouped: dict[str, list[Target]] = {}
            for target in targets.values():
                if matches(target.labels):
                    grouped.setdefault(target.pod, []).append(target)
            return {pod: tuple(sorted(held, key=_UID)) for pod, held in grouped.items()}
        # Every candidate already satisfies the requirement it was found by.
        rest = tuple(r for r in selector.requirements if r is not best_requirement)
        if not rest and len(best) == 1:
            return best[0]
        merged: dict[str, tuple[Target, ...]] = {}
        for group in best:
            for pod, held in group.items():
                if rest:
                    if first_only:
                        first = next((t for t in held if matches(t.labels)), None)
                        held = () if first is None else (first,)
                    else:
                        held = tuple(t for t in held if matches(t.labels))
                    if not held:
                        continue
                prior = merged.get(pod)
                merged[pod] = held if prior is None else tuple(sorted(prior + held, key=_UID))
        return merged

    def runs(self) -> Iterator[Run]:
        return iter(self._runs.values())

    def pods(self) -> Iterator[RuntimePod]:
        return iter(self._pods.values())

    def workspaces(self) -> Iterator[Workspace]:
        return iter(self._workspaces.values())

    def __len__(self) -> int:
        """How many objects are stored (Runs, Runtime Pods, workspaces)."""
        return len(self._runs) + len(self._pods) + len(self._workspaces)


_STATE_SETTERS: Final = tuple(getattr(ClusterState, name).__set__ for name in ClusterState.__slots__)
_new_object: Final = object.__new__


def _state(
    runs: PDict[RunKey, Run],
    run_keys_by_uid: PDict[str, PDict[str, RunKey]],
    pods: PDict[_NsName, RuntimePod],
    workspaces: PDict[_NsName, Workspace],
    pending: PDict[_NsName, PDict[RunKey, RunKey]],
    usage: PDict[_NsName, Resources],
    targets: PDict[str, PDict[str, Target]],
    by_label: PDict[_LabelKey, PDict[str, tuple[Target, ...]]],
    label_values: PDict[_NsName, PDict[str, str]],
    groups: PDict[_NsName, _PodGroup],
    bound: PDict[_NsName, PDict[str, str]],
) -> ClusterState:
    """``ClusterState(...)`` with the fields in declaration order, without the frozen
    dataclass's ``__init__`` and its ``object.__setattr__`` call per field (one state is
    built per watch event; docs/performance.md, "Design measurements"). The value is the
    same frozen instance."""
    state: ClusterState = _new_object(ClusterState)
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10 = _STATE_SETTERS
    s0(state, runs)
    s1(state, run_keys_by_uid)
    s2(state, pods)
    s3(state, workspaces)
    s4(state, pending)
    s5(state, usage)
    s6(state, targets)
    s7(state, by_label)
    s8(state, label_values)
    s9(state, groups)
    s10(state, bound)
    return state


_SET_SLOT_POD, _SET_SLOT_USAGE, _SET_SLOT_RUNS, _SET_SLOT_CLASS = (getattr(PodSlot, name).__set__ for name in PodSlot.__slots__)


def _slot(pod: RuntimePod, usage: Resources) -> PodSlot:
    """``PodSlot(pod, usage)`` without the frozen ``__init__``'s per-field calls (see :func:`_state`)."""
    slot: PodSlot = _new_object(PodSlot)
    _SET_SLOT_POD(slot, pod)
    _SET_SLOT_USAGE(slot, usage)
    runs_used = usage.get(RUNS_RESOURCE, 0)
    _SET_SLOT_RUNS(slot, runs_used)
    _SET_SLOT_CLASS(slot, load_class_of(pod, usage, runs_used))
    return slot


# --- applying one event ------------------------------------------------------------


def apply(state: ClusterState, event: Event) -> ClusterState:
    """The state after ``event``; O(log n) per index entry the event's objects touch.

    ``ADDED`` and ``MODIFIED`` both upsert (a relist may replay either); a
    ``DELETED`` of an object never seen is a no-op.
    """
    obj = event.obj
    if isinstance(obj, Run):
        return _apply_run(state, obj.key, None if event.type == "DELETED" else obj)
    if isinstance(obj, RuntimePod):
        return _apply_pod(state, obj.namespace, obj.name, None if event.type == "DELETED" else obj)
    return _apply_workspace(state, obj.namespace, obj.name, None if event.type == "DELETED" else obj)


def _with(state: ClusterState, **changes: object) -> ClusterState:
    fields = {
        "_runs": state._runs,
        "_run_keys_by_uid": state._run_keys_by_uid,
        "_pods": state._pods,
        "_workspaces": state._workspaces,
        "_pending": state._pending,
        "_usage": state._usage,
        "_targets": state._targets,
        "_by_label": state._by_label,
        "_label_values": state._label_values,
        "_groups": state._groups,
        "_bound": state._bound,
    }
    fields.update(changes)
    return ClusterState(**fields)  # type: ignore[arg-type]


def _apply_workspace(state: ClusterState, namespace: str, name: str, new: Workspace | None) -> ClusterState:
    key = (namespace, name)
    if new is None:
        if key not in state._workspaces:
            return state
        return _with(state, _workspaces=state._workspaces.discard(key))
    return _with(state, _workspaces=state._workspaces.set(key, new))


def _apply_pod(state: ClusterState, namespace: str, name: str, new: RuntimePod | None) -> ClusterState:
    key = (namespace, name)
    old = state._pods.get(key)
    if new is not None and not new.runtime:
        new = None  # not a Runtime Pod (any more): forget it
    if old is None and new is None:
        return state
    pods = state._pods.set(key, new) if new is not None else state._pods.discard(key)
    usage, targets, by_label, label_values = state._usage, state._targets, state._by_label, state._label_values
    old_uid = None if old is None else old.uid
    new_uid = None if new is None else new.uid
    bound = state._bound.get(key) if old_uid != new_uid else None
    if bound:
        # The pod went, came (back) or was replaced under its name: the Runs bound to the
        # uid it had stop counting here, those bound to the uid it has now start (SPEC §1).
        total = usage.get(key) or EMPTY_RESOURCES
        in_namespace = targets.get(namespace)
        for run_name, uid in bound.items():
            was, now = uid == old_uid, uid == new_uid
            if was == now:
                continue
            run = state._runs[RunKey(namespace, run_name)]
            total = _shifted(total, run.requests, 1 if now else -1)
            if now:
                target = Target(pod=name, labels=run.labels, run_uid=run.uid)
                targets = set_in(targets, namespace, run_name, target)
                by_label, label_values = _indexed(by_label, label_values, namespace, target, 1)
            else:
                held = None if in_namespace is None else in_namespace.get(run_name)
                if held is not None:
                    targets = discard_in(targets, namespace, run_name)
                    by_label, label_values = _indexed(by_label, label_values, namespace, held, -1)
        usage = usage.set(key, total) if total else usage.discard(key)
    groups = state._groups
    if old is not None and (new is None or new.runtime != old.runtime):
        group_key = (namespace, old.runtime)
        group = groups.get(group_key)
        rest = None if group is None else group.remove(name)
        groups = groups.set(group_key, rest) if rest is not None else groups.discard(group_key)
    if new is not None:
        group_key = (namespace, new.runtime)
        group = groups.get(group_key)
        used = usage.get(key)
        slot = _slot(new, EMPTY_RESOURCES if used is None else used)
        groups = groups.set(group_key, group.put(slot) if group is not None else _PodGroup.of((slot,)))
    return _state(
        state._runs,
        state._run_keys_by_uid,
        pods,
        state._workspaces,
        state._pending,
        usage,
        targets,
        by_label,
        label_values,
        groups,
        state._bound,
    )


def _apply_run(state: ClusterState, key: RunKey, new: Run | None) -> ClusterState:
    old = state._runs.get(key)
    if old is None:
        if new is None:
            return state
    elif new is not None and old.resource_version == new.resource_version and old == new:
        return state  # (a new resourceVersion is a different object: skip the field-by-field compare)
    namespace = key.namespace

    runs = state._runs.set(key, new) if new is not None else state._runs.discard(key)
    if old is not None and new is not None and old.uid == new.uid and _same_contribution(old, new):
        # The common status update (Scheduled -> Running -> Ready, a message, a
        # condition): no index but the Run's own entry changes.
        return _state(
            runs,
            state._run_keys_by_uid,
            state._pods,
            state._workspaces,
            state._pending,
            state._usage,
            state._targets,
            state._by_label,
            state._label_values,
            state._groups,
            state._bound,
        )

    uids = state._run_keys_by_uid
    if old is not None and (new is None or new.uid != old.uid):
        by_uid = uids.get(namespace)
        if by_uid is not None and by_uid.get(old.uid) == key:
            uids = discard_in(uids, namespace, old.uid)
    if new is not None and (old is None or old.uid != new.uid):
        uids = set_in(uids, namespace, new.uid, key)

    pending = state._pending
    old_group = _pending_group(old)
    new_group = _pending_group(new)
    if old_group != new_group:
        if old_group is not None:
            pending = discard_in(pending, old_group, key)
        if new_group is not None:
            pending = set_in(pending, new_group, key, key)

    bound = state._bound
    old_binding, new_binding = _binding(old), _binding(new)
    if old_binding != new_binding:
        if old_binding is not None:
            bound = discard_in(bound, (namespace, old_binding[0]), key.name)
        if new_binding is not None:
            bound = set_in(bound, (namespace, new_binding[0]), key.name, new_binding[1])

    usage, groups = state._usage, state._groups
    targets, by_label, label_values = state._targets, state._by_label, state._label_values
    pods = state._pods
    old_run = old if _places(old, pods) else None
    new_run = new if _places(new, pods) else None
    if old_run is not None or new_run is not None:
        # An active Run's charge is (assigned pod, requests) and its target (assigned
        # pod, labels, uid): compared field by field, built only when they change.
        old_pod = "" if old_run is None else old_run.status.assigned_pod
        new_pod = "" if new_run is None else new_run.status.assigned_pod
        old_requests = EMPTY_RESOURCES if old_run is None else old_run.requests
        new_requests = EMPTY_RESOURCES if new_run is None else new_run.requests
        if old_pod != new_pod or old_requests != new_requests:
            if old_run is not None:
                usage, groups = _usage_change(state, usage, groups, namespace, old_pod, old_requests, -1)
            if new_run is not None:
                usage, groups = _usage_change(state, usage, groups, namespace, new_pod, new_requests, 1)
        old_labels = EMPTY_LABELS if old_run is None else old_run.labels
        new_labels = EMPTY_LABELS if new_run is None else new_run.labels
        if (
            old_run is None
            or new_run is None
            or old_pod != new_pod
            or old_labels != new_labels
            or old_run.uid != new_run.uid
        ):
            name = key.name
            in_namespace = targets.get(namespace)
            old_target = None if in_namespace is None else in_namespace.get(name)
            new_target: Target | None = None
            if new_run is not None:
                new_target = Target(pod=new_pod, labels=new_labels, run_uid=new_run.uid)
                targets = set_in(targets, namespace, name, new_target)
            else:
                targets = discard_in(targets, namespace, name)
            # Same pod and uid: a label kept with its value swaps the target in place.
            kept_labels: Mapping[str, str] = EMPTY_LABELS
            if old_target is not None and new_target is not None:
                if old_target.pod == new_target.pod and old_target.run_uid == new_target.run_uid:
                    kept_labels = {k: v for k, v in new_labels.items() if old_target.labels.get(k) == v}
            if old_target is not None:
                old_on = old_target.pod
                for label, value in old_target.labels.items():
                    kept = kept_labels.get(label) == value
                    size = len(by_label)
                    by_label = update_in(
                        by_label,
                        (namespace, label, value),
                        old_on,
                        partial(_swapped, old=old_target, new=new_target if kept else None),
                    )
                    if len(by_label) != size:  # the last target with this value went
                        label_values = discard_in(label_values, (namespace, label), value)
            if new_target is not None:
                for label, value in new_labels.items():
                    if kept_labels.get(label) == value:
                        continue  # swapped in place above
                    size = len(by_label)
                    by_label = update_in(
                        by_label, (namespace, label, value), new_pod, partial(_swapped, old=None, new=new_target)
                    )
                    if len(by_label) != size:  # the first target with this value came
                        label_values = set_in(label_values, (namespace, label), value, value)

    return _state(
        runs,
        uids,
        state._pods,
        state._workspaces,
        pending,
        usage,
        targets,
        by_label,
        label_values,
        groups,
        bound,
    )


def _indexed(
    by_label: PDict[_LabelKey, PDict[str, tuple[Target, ...]]],
    label_values: PDict[_NsName, PDict[str, str]],
    namespace: str,
    target: Target,
    sign: int,
) -> tuple[PDict[_LabelKey, PDict[str, tuple[Target, ...]]], PDict[_NsName, PDict[str, str]]]:
    """The label index and value sets with ``target`` added (``sign`` 1) or removed (-1)."""
    change = partial(_swapped, old=None, new=target) if sign > 0 else partial(_swapped, old=target, new=None)
    for label, value in target.labels.items():
        size = len(by_label)
        by_label = update_in(by_label, (namespace, label, value), target.pod, change)
        if len(by_label) != size:  # the first target with this value came, or the last went
            if sign > 0:
                label_values = set_in(label_values, (namespace, label), value, value)
            else:
                label_values = discard_in(label_values, (namespace, label), value)
    return by_label, label_values


def _swapped(held: tuple[Target, ...] | None, old: Target | None, new: Target | None) -> tuple[Target, ...] | None:
    """A pod's targets for one label (sorted by uid) without ``old`` and with ``new``;
    ``None`` when none is left."""
    out = held or ()
    if old is not None and out:
        uid = old.run_uid
        at = bisect_left(out, uid, key=_UID)
        while at < len(out) and out[at].run_uid == uid:
            if out[at] is old or out[at] == old:
                out = out[:at] + out[at + 1 :]
                break
            at += 1
    if new is not None:
        at = bisect_left(out, new.run_uid, key=_UID)
        out = out[:at] + (new,) + out[at:]
    return out or None


# --- what one Run contributes -------------------------------------------------------


def _same_contribution(old: Run, new: Run) -> bool:
    """Whether two versions of a Run (same key and uid) contribute the same pending
    entry, charge and target, checked without building them."""
    a, b = old.status, new.status
    if a.active != b.active:
        return False
    if not a.active:
        return _pending_group(old) == _pending_group(new)
    return (
        a.assigned_pod == b.assigned_pod
        and a.assigned_pod_uid == b.assigned_pod_uid
        and old.requests == new.requests
        and old.labels == new.labels
    )


def _pending_group(run: Run | None) -> _NsName | None:
    """The pending index entry of a Run: Pending (or empty phase), not active, naming a workspace."""
    if run is None or run.workspace is None or not run.status.pending or run.status.active:
        return None
    return (run.namespace, run.workspace.name)


def _places(run: Run | None, pods: PDict[_NsName, RuntimePod] | dict[_NsName, RuntimePod]) -> bool:
    """Whether the Run is active on a pod there (SPEC §1): active, and bound either by name
    alone (no ``assignedPodUID``) or to the uid the pod of that name has now. A Run whose
    pod is gone or was replaced consumes nothing and is no affinity target."""
    if run is None:
        return False
    status = run.status
    if not status.active:
        return False
    uid = status.assigned_pod_uid
    if not uid:
        return True
    pod = pods.get((run.namespace, status.assigned_pod))
    return pod is not None and pod.uid == uid


def _binding(run: Run | None) -> tuple[str, str] | None:
    """``(pod, assignedPodUID)`` of an active Run bound with a uid (the ``_bound`` entry)."""
    if run is None or not run.status.active or not run.status.assigned_pod_uid:
        return None
    return (run.status.assigned_pod, run.status.assigned_pod_uid)


def _charge(run: Run, pods: dict[_NsName, RuntimePod]) -> tuple[str, Resources] | None:
    """``(pod, requests)`` a Run charges while on its pod: its usable requests (SPEC §2)."""
    if not _places(run, pods):
        return None
    return (run.status.assigned_pod, run.requests)


def _target(run: Run, pods: dict[_NsName, RuntimePod]) -> Target | None:
    if not _places(run, pods):
        return None
    return Target(pod=run.status.assigned_pod, labels=run.labels, run_uid=run.uid)


# --- small persistent helpers -----------------------------------------------------------


def _key_set(keys: set[RunKey]) -> PDict[RunKey, RunKey]:
    return pdict({key: key for key in keys})


def _usage_change(
    state: ClusterState,
    usage: PDict[_NsName, Resources],
    groups: PDict[_NsName, _PodGroup],
    namespace: str,
    pod_name: str,
    delta: Resources,
    sign: int,
) -> tuple[PDict[_NsName, Resources], PDict[_NsName, _PodGroup]]:
    """Charge (``sign`` 1) or retract (-1) ``delta`` on its pod, and refresh that pod's
    slot if it is known."""
    key = (namespace, pod_name)
    before = usage.get(key)
    total = _shifted(EMPTY_RESOURCES if before is None else before, delta, sign)
    usage = usage.set(key, total) if total else usage.discard(key)
    pod = state._pods.get(key)
    if pod is not None:
        group_key = (namespace, pod.runtime)
        group = groups.get(group_key)
        if group is not None:
            groups = groups.set(group_key, group.put(_slot(pod, total)))
    return usage, groups


def _shifted(usage: Resources, delta: Resources, sign: int) -> Resources:
    """``usage + sign * delta`` (``resources.add``/``subtract``), with a fast path for
    the common one-resource usage and request (``{runs: n}``)."""
    if len(delta) == 1 and len(usage) <= 1:
        ((name, amount),) = delta.items()
        if not usage:
            value = sign * amount
        elif name in usage:
            value = usage[name] + sign * amount
        else:
            return add(usage, delta) if sign > 0 else subtract(usage, delta)
        return MappingProxyType({name: value}) if value else EMPTY_RESOURCES
    return add(usage, delta) if sign > 0 else subtract(usage, delta)


# --- bulk building -------------------------------------------------------------------------


def from_objects(objects: Iterable[Object]) -> ClusterState:
    """The state holding ``objects`` (a later object with the same key wins).

    Equal to applying one ``ADDED`` event per object, but built with plain
    dicts and frozen once, so a 50k-object list costs one pass, not 50k
    persistent updates.
    """
    runs: dict[RunKey, Run] = {}
    pods: dict[_NsName, RuntimePod] = {}
    workspaces: dict[_NsName, Workspace] = {}
    for obj in objects:
        if isinstance(obj, Run):
            runs[obj.key] = obj
        elif isinstance(obj, RuntimePod):
            pods[(obj.namespace, obj.name)] = obj
        else:
            workspaces[(obj.namespace, obj.name)] = obj

    stored_pods = {key: pod for key, pod in pods.items() if pod.runtime}
    uids: dict[str, dict[str, RunKey]] = {}
    pending: dict[_NsName, set[RunKey]] = {}
    bound: dict[_NsName, dict[str, str]] = {}
    usage: dict[_NsName, dict[str, Amount]] = {}
    targets: dict[str, dict[str, Target]] = {}
    by_label: dict[_LabelKey, dict[str, list[Target]]] = {}
    label_values: dict[_NsName, dict[str, str]] = {}
    for key, run in runs.items():
        uids.setdefault(key.namespace, {})[run.uid] = key
        group = _pending_group(run)
        if group is not None:
            pending.setdefault(group, set()).add(key)
        binding = _binding(run)
        if binding is not None:
            bound.setdefault((key.namespace, binding[0]), {})[key.name] = binding[1]
        charge = _charge(run, stored_pods)
        if charge is not None:
            total = usage.setdefault((key.namespace, charge[0]), {})
            for name, amount in charge[1].items():
                total[name] = total.get(name, 0) + amount
                if not total[name]:
                    del total[name]
        target = _target(run, stored_pods)
        if target is not None:
            targets.setdefault(key.namespace, {})[key.name] = target
            for label, value in target.labels.items():
                by_label.setdefault((key.namespace, label, value), {}).setdefault(target.pod, []).append(target)
                label_values.setdefault((key.namespace, label), {})[value] = value

    frozen_usage = {k: frozen_resources(v) for k, v in usage.items() if v}
    by_runtime: dict[_NsName, list[PodSlot]] = {}
    for (namespace, name), pod in stored_pods.items():
        slot = PodSlot(pod, frozen_usage.get((namespace, name), EMPTY_RESOURCES))
        by_runtime.setdefault((namespace, pod.runtime), []).append(slot)

    return ClusterState(
        _runs=pdict(runs),
        _run_keys_by_uid=pdict({k: pdict(v) for k, v in uids.items()}),
        _pods=pdict(stored_pods),
        _workspaces=pdict(workspaces),
        _pending=pdict({k: _key_set(v) for k, v in pending.items()}),
        _usage=pdict(frozen_usage),
        _targets=pdict({k: pdict(v) for k, v in targets.items()}),
        _by_label=pdict(
            {k: pdict({pod: tuple(sorted(held, key=_UID)) for pod, held in v.items()}) for k, v in by_label.items()}
        ),
        _label_values=pdict({k: pdict(v) for k, v in label_values.items()}),
        _groups=pdict({k: _PodGroup.of(v) for k, v in by_runtime.items()}),
        _bound=pdict({k: pdict(v) for k, v in bound.items()}),
    )


EMPTY_STATE: Final = from_objects(())
"""The state holding nothing."""
