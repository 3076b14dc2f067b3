"""The cluster as one persistent value, updated in O(log n) per watch event.

Rule: every index is keyed by namespace, and ``apply`` only touches the entries
the event's old and new object contribute to, so a scheduling cycle pays for its
own namespace and runtime, never for the size of the cluster (DESIGN "Incremental
state"). Indexes kept here:

- runs by ``RunKey``; run keys by ``(namespace, uid)``;
- Runtime Pods by ``(namespace, name)`` and by ``(namespace, runtime)``
  (a pod without a ``runtime`` label is not stored);
- workspaces by ``(namespace, name)``;
- Pending run keys by ``(namespace, spec.runtime)`` (for wakeups, SPEC §8);
- actual usage by ``(namespace, pod)``: the sum of active Runs' requests, kept
  incrementally (retract the old contribution, add the new);
- active affinity targets per namespace by run name, with a label index
  ``(namespace, key, value) -> targets`` and a key index ``(namespace, key) -> targets``
  so that ``matching_targets`` starts from the most selective positive
  requirement of a selector.

This is a purely computational module with no side effects; the effect layer
holds the current value in an atom and swaps in ``apply``'s result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal, TypeAlias, TypeVar

from pyrsistent import pmap, pset
from pyrsistent.typing import PMap, PSet

from kruntimes.pure.model import (
    EMPTY_RESOURCES,
    LabelSelector,
    Resources,
    Run,
    RunKey,
    RuntimePod,
    Target,
    Workspace,
    frozen_resources,
)
from kruntimes.pure.quantity import Amount
from kruntimes.pure.resources import add, subtract

EventType: TypeAlias = Literal["ADDED", "MODIFIED", "DELETED"]
Object: TypeAlias = RuntimePod | Run | Workspace

_NsName: TypeAlias = tuple[str, str]
"""``(namespace, name)``; also ``(namespace, uid)`` and ``(namespace, runtime)``."""
_LabelKey: TypeAlias = tuple[str, str, str]
"""``(namespace, label key, label value)``."""
_K = TypeVar("_K")
_V = TypeVar("_V")
_ResourceOp: TypeAlias = Callable[[Resources, Resources], Resources]


@dataclass(frozen=True, slots=True)
class Event:
    """One watch event, decoded. For ``DELETED`` the object is the last state seen."""

    type: EventType
    obj: Object


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Persistent indexes over the Runs, Runtime Pods and workspaces the informers saw.

    Build with :func:`from_objects` or :data:`EMPTY_STATE` and :func:`apply`;
    the fields are private to this module.
    """

    _runs: PMap[RunKey, Run]
    _run_keys_by_uid: PMap[_NsName, RunKey]
    _pods: PMap[_NsName, RuntimePod]
    _pods_by_runtime: PMap[_NsName, PMap[str, RuntimePod]]
    _workspaces: PMap[_NsName, Workspace]
    _pending: PMap[_NsName, PSet[RunKey]]
    _usage: PMap[_NsName, Resources]
    _targets: PMap[str, PMap[str, Target]]
    """namespace -> run name -> the active Run as a target."""
    _by_label: PMap[_LabelKey, PMap[str, Target]]
    """(namespace, key, value) -> run name -> target: the targets themselves, so a
    lookup never goes back through the namespace-wide map."""
    _by_label_key: PMap[_NsName, PMap[str, Target]]

    # --- reads -------------------------------------------------------------------

    def run(self, key: RunKey) -> Run | None:
        return self._runs.get(key)

    def run_by_uid(self, namespace: str, uid: str) -> Run | None:
        key = self._run_keys_by_uid.get((namespace, uid))
        return None if key is None else self._runs.get(key)

    def pod(self, namespace: str, name: str) -> RuntimePod | None:
        return self._pods.get((namespace, name))

    def pods_of(self, namespace: str, runtime: str) -> tuple[RuntimePod, ...]:
        """The Runtime Pods labelled ``runtime=<runtime>`` in the namespace, in any order."""
        pods = self._pods_by_runtime.get((namespace, runtime))
        return () if pods is None else tuple(pods.values())

    def workspace(self, namespace: str, name: str) -> Workspace | None:
        return self._workspaces.get((namespace, name))

    def usage(self, namespace: str, pod: str) -> Resources:
        """Active Runs' requests on that pod (known or not); no zero entries."""
        return self._usage.get((namespace, pod), EMPTY_RESOURCES)

    def pending_keys(self, namespace: str, runtime: str) -> frozenset[RunKey]:
        """Pending Runs of ``(namespace, spec.runtime)``: one index lookup (SPEC §8)."""
        keys = self._pending.get((namespace, runtime))
        return frozenset() if keys is None else frozenset(keys)

    def matching_targets(self, namespace: str, selector: LabelSelector) -> tuple[Target, ...]:
        """Active Runs of the namespace whose labels ``selector`` matches, as targets.

        Candidates come from the positive requirement (``In``: union over its
        values; ``Exists``: the key index) with the fewest entries, so Runs whose
        labels no requirement names are never looked at. Only a selector made
        solely of ``NotIn``/``DoesNotExist`` scans the namespace's targets, which
        it must: every unlabelled Run matches it. Sorted by pod, then run uid, so
        the result does not depend on hash order.
        """
        targets = self._targets.get(namespace)
        if targets is None:
            return ()
        best: list[PMap[str, Target]] | None = None
        best_size = 0
        for requirement in selector.requirements:
            if requirement.operator == "In":
                sets = [
                    found
                    for value in requirement.values
                    if (found := self._by_label.get((namespace, requirement.key, value))) is not None
                ]
            elif requirement.operator == "Exists":
                found = self._by_label_key.get((namespace, requirement.key))
                sets = [] if found is None else [found]
            else:
                continue
            size = sum(len(s) for s in sets)
            if best is None or size < best_size:
                best, best_size = sets, size
                if size == 0:
                    return ()
        candidates: Iterable[Target]
        if best is None:
            candidates = targets.values()
        else:
            candidates = (target for group in best for target in group.values())
        matched = [t for t in candidates if selector.matches(t.labels)]
        matched.sort(key=lambda t: (t.pod, t.run_uid))
        return tuple(matched)

    def runs(self) -> Iterator[Run]:
        return iter(self._runs.values())

    def pods(self) -> Iterator[RuntimePod]:
        return iter(self._pods.values())

    def workspaces(self) -> Iterator[Workspace]:
        return iter(self._workspaces.values())

    def __len__(self) -> int:
        """How many objects are stored (Runs, Runtime Pods, workspaces)."""
        return len(self._runs) + len(self._pods) + len(self._workspaces)


def _empty() -> ClusterState:
    return ClusterState(pmap(), pmap(), pmap(), pmap(), pmap(), pmap(), pmap(), pmap(), pmap(), pmap())


EMPTY_STATE: Final = _empty()


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


def _apply_workspace(state: ClusterState, namespace: str, name: str, new: Workspace | None) -> ClusterState:
    key = (namespace, name)
    if new is None:
        if key not in state._workspaces:
            return state
        return replace(state, _workspaces=state._workspaces.remove(key))
    return replace(state, _workspaces=state._workspaces.set(key, new))


def _apply_pod(state: ClusterState, namespace: str, name: str, new: RuntimePod | None) -> ClusterState:
    key = (namespace, name)
    old = state._pods.get(key)
    if new is not None and not new.runtime:
        new = None  # not a Runtime Pod (any more): forget it
    if old is None and new is None:
        return state
    pods = state._pods.set(key, new) if new is not None else state._pods.remove(key)
    by_runtime = state._pods_by_runtime
    if old is not None and (new is None or new.runtime != old.runtime):
        by_runtime = _map_discard(by_runtime, (namespace, old.runtime), name)
    if new is not None:
        group = by_runtime.get((namespace, new.runtime), _EMPTY_POD_GROUP)
        by_runtime = by_runtime.set((namespace, new.runtime), group.set(name, new))
    return replace(state, _pods=pods, _pods_by_runtime=by_runtime)


def _apply_run(state: ClusterState, key: RunKey, new: Run | None) -> ClusterState:
    old = state._runs.get(key)
    if old is None and new is None:
        return state
    if old is not None and new is not None and old == new:
        return state
    namespace = key.namespace

    runs = state._runs.set(key, new) if new is not None else state._runs.remove(key)

    uids = state._run_keys_by_uid
    if old is not None and (new is None or new.uid != old.uid) and uids.get((namespace, old.uid)) == key:
        uids = uids.remove((namespace, old.uid))
    if new is not None and (old is None or old.uid != new.uid):
        uids = uids.set((namespace, new.uid), key)

    pending = state._pending
    old_group = _pending_group(old)
    new_group = _pending_group(new)
    if old_group != new_group:
        if old_group is not None:
            pending = _set_discard(pending, old_group, key)
        if new_group is not None:
            pending = pending.set(new_group, pending.get(new_group, _EMPTY_KEYS).add(key))

    usage = state._usage
    old_charge = _charge(old)
    new_charge = _charge(new)
    if old_charge != new_charge:
        if old_charge is not None:
            usage = _usage_change(usage, (namespace, old_charge[0]), old_charge[1], subtract)
        if new_charge is not None:
            usage = _usage_change(usage, (namespace, new_charge[0]), new_charge[1], add)

    targets, by_label, by_label_key = state._targets, state._by_label, state._by_label_key
    old_target = _target(old)
    new_target = _target(new)
    if old_target != new_target:
        group = targets.get(namespace, _EMPTY_TARGETS)
        group = group.set(key.name, new_target) if new_target is not None else group.discard(key.name)
        targets = targets.set(namespace, group) if group else targets.discard(namespace)
        old_labels: Mapping[str, str] = old_target.labels if old_target is not None else {}
        for label, value in old_labels.items():
            if new_target is None or new_target.labels.get(label) != value:
                by_label = _map_discard(by_label, (namespace, label, value), key.name)
            if new_target is None or label not in new_target.labels:
                by_label_key = _map_discard(by_label_key, (namespace, label), key.name)
        if new_target is not None:
            for label, value in new_target.labels.items():
                by_label = _map_put(by_label, (namespace, label, value), key.name, new_target)
                by_label_key = _map_put(by_label_key, (namespace, label), key.name, new_target)

    return ClusterState(
        _runs=runs,
        _run_keys_by_uid=uids,
        _pods=state._pods,
        _pods_by_runtime=state._pods_by_runtime,
        _workspaces=state._workspaces,
        _pending=pending,
        _usage=usage,
        _targets=targets,
        _by_label=by_label,
        _by_label_key=by_label_key,
    )


# --- what one Run contributes -------------------------------------------------------


def _pending_group(run: Run | None) -> _NsName | None:
    """The pending index entry of a Run: Pending (or empty phase) and not active."""
    if run is None or not run.status.pending or run.status.active:
        return None
    return (run.namespace, run.runtime)


def _charge(run: Run | None) -> tuple[str, Resources] | None:
    """``(pod, requests)`` an active Run charges: its usable requests (SPEC §2)."""
    if run is None or not run.status.active:
        return None
    return (run.status.assigned_pod, run.requests)


def _target(run: Run | None) -> Target | None:
    if run is None or not run.status.active:
        return None
    return Target(pod=run.status.assigned_pod, labels=run.labels, run_uid=run.uid)


# --- small persistent helpers -----------------------------------------------------------

_EMPTY_KEYS: Final[PSet[RunKey]] = pset()
_EMPTY_TARGETS: Final[PMap[str, Target]] = pmap()
_EMPTY_POD_GROUP: Final[PMap[str, RuntimePod]] = pmap()


def _set_discard(index: PMap[_K, PSet[_V]], key: _K, member: _V) -> PMap[_K, PSet[_V]]:
    """Remove ``member`` from the set at ``key``; drop the entry when it empties."""
    members = index.get(key)
    if members is None or member not in members:
        return index
    rest = members.remove(member)
    return index.set(key, rest) if rest else index.remove(key)


def _map_put(index: PMap[_K, PMap[str, _V]], key: _K, name: str, value: _V) -> PMap[_K, PMap[str, _V]]:
    group: PMap[str, _V] = index.get(key) or pmap()
    return index.set(key, group.set(name, value))


def _map_discard(index: PMap[_K, PMap[str, _V]], key: _K, name: str) -> PMap[_K, PMap[str, _V]]:
    group = index.get(key)
    if group is None or name not in group:
        return index
    rest = group.remove(name)
    return index.set(key, rest) if rest else index.remove(key)


def _usage_change(
    usage: PMap[_NsName, Resources],
    key: _NsName,
    delta: Resources,
    op: _ResourceOp,
) -> PMap[_NsName, Resources]:
    total = op(usage.get(key, EMPTY_RESOURCES), delta)
    return usage.set(key, total) if total else usage.discard(key)


def _sized_pset(members: set[_V]) -> PSet[_V]:
    """A PSet with room for its members: ``pset`` defaults to 8 buckets, which
    would make every later add or remove scan a bucket of n/8 entries."""
    return pset(members, pre_size=max(8, 2 * len(members)))


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

    uids: dict[_NsName, RunKey] = {}
    pending: dict[_NsName, set[RunKey]] = {}
    usage: dict[_NsName, dict[str, Amount]] = {}
    targets: dict[str, dict[str, Target]] = {}
    by_label: dict[_LabelKey, dict[str, Target]] = {}
    by_label_key: dict[_NsName, dict[str, Target]] = {}
    for key, run in runs.items():
        uids[(key.namespace, run.uid)] = key
        group = _pending_group(run)
        if group is not None:
            pending.setdefault(group, set()).add(key)
        charge = _charge(run)
        if charge is not None:
            total = usage.setdefault((key.namespace, charge[0]), {})
            for name, amount in charge[1].items():
                total[name] = total.get(name, 0) + amount
                if not total[name]:
                    del total[name]
        target = _target(run)
        if target is not None:
            targets.setdefault(key.namespace, {})[key.name] = target
            for label, value in target.labels.items():
                by_label.setdefault((key.namespace, label, value), {})[key.name] = target
                by_label_key.setdefault((key.namespace, label), {})[key.name] = target

    stored_pods = {key: pod for key, pod in pods.items() if pod.runtime}
    by_runtime: dict[_NsName, dict[str, RuntimePod]] = {}
    for (namespace, name), pod in stored_pods.items():
        by_runtime.setdefault((namespace, pod.runtime), {})[name] = pod

    return ClusterState(
        _runs=pmap(runs),
        _run_keys_by_uid=pmap(uids),
        _pods=pmap(stored_pods),
        _pods_by_runtime=pmap({k: pmap(v) for k, v in by_runtime.items()}),
        _workspaces=pmap(workspaces),
        _pending=pmap({k: _sized_pset(v) for k, v in pending.items()}),
        _usage=pmap({k: frozen_resources(v) for k, v in usage.items() if v}),
        _targets=pmap({k: pmap(v) for k, v in targets.items()}),
        _by_label=pmap({k: pmap(v) for k, v in by_label.items()}),
        _by_label_key=pmap({k: pmap(v) for k, v in by_label_key.items()}),
    )
