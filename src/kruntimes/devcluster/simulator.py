"""The runtime simulator: what the kruntimes Runtime controller and runtimed would do, on the dev cluster.

For every ``Runtime`` it keeps ``spec.replicas`` Runtime Pods named
``<runtime>-<n>`` from its ``spec.template`` plus a ``runtimed`` container (labels ``runtime=<name>``, capacity annotations
``kruntimes.io/capacity.<resource>``, owned by the Runtime), marks them
Running and Ready, and refreshes the ``kruntimes.io/RuntimedReady``
heartbeat's ``lastProbeTime``. Optionally it executes Runs bound to its pods:
Scheduled -> Running -> Succeeded after a fixed duration.

It is edge-triggered on the store's commit feed, so a pass costs what changed,
not what exists (a 50,000-Run backlog must not slow the API server it shares
a process with): a committed runtime, pod or Run marks that key dirty, and a
pass re-reads only the dirty keys from the store and acts on their *current*
state (so a late or repeated event is harmless). Heartbeats and Run
completions are timers: heartbeats fall due in batches, a Run ends on time
(a late end would hold its slot and lengthen every drain). A Runtime is reconciled as a whole (its
few pods) when it or one of its pods changes in a way that matters (phase,
deletion, annotations, owner), never on a mere heartbeat. The first pass, and
the one after the feed overflows, lists everything once. Every write goes
through :class:`ObjectService`, so it appears in watches and the write
history under the user agent :data:`USER_AGENT`, and carries the
resourceVersion it read; a conflict means someone else committed a newer
version, whose event marks the key dirty again, so it is retried on the next
pass.
"""

from __future__ import annotations

import heapq
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, ParamSpec, final

from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.resources import KRUNTIMES_GROUP, ResourceDef
from kruntimes.devcluster.service import ObjectService
from kruntimes.devcluster.store import Bookmark, Delivery, Subscription, WriteContext
from kruntimes.devcluster.times import rfc3339
from kruntimes.devcluster.types import GroupResource, ObjectKey, Obj, json_copy

_P = ParamSpec("_P")

USER_AGENT: Final = "kruntimes-devcluster/simulator"
RUNTIMES: Final = GroupResource(KRUNTIMES_GROUP, "runtimes")
RUNS: Final = GroupResource(KRUNTIMES_GROUP, "runs")
PODS: Final = GroupResource("", "pods")
HEARTBEAT: Final = "kruntimes.io/RuntimedReady"
CAPACITY_PREFIX: Final = "kruntimes.io/capacity."
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "kruntimes-devcluster"}


@final
@dataclass(frozen=True, slots=True)
class SimulatorSettings:
    heartbeat_interval: float = 5.0
    """Seconds between heartbeats (lastProbeTime has whole-second precision, so below 1 s it moves once a second)."""
    execute_runs: float | None = None
    """Seconds a Run assigned to a simulated pod takes from Running to Succeeded; None leaves Runs alone."""
    yield_after_beat: bool = False
    """Let go of the interpreter (``time.sleep(0)``) after each heartbeat written. The pods stand for
    kubelets and runtime daemons on other machines, whose heartbeats reach a real API server as
    requests among all the others; a wave of 5,000 of them as one loop held back every request
    thread of the server for the whole wave (paced p99 at 5,000 pods: 8-18 ms with the yield, 20-31 ms
    without). Only for a server that has a process of its own and quick interpreter turns
    (``kruntimes dev-cluster``): with CPython's default 5 ms turns each yield may cost the loop a
    whole turn, and with it on, an in-process cluster under the full test suite's load failed a
    chaos test's takeover check twice in two runs (it passed with it off)."""


def set_condition(conditions: list[Obj], type_: str, status: str, now: str, *, reason: str = "", message: str = "", probe: bool = False) -> list[Obj]:
    """Conditions with ``type_`` set; ``lastTransitionTime`` moves only when the status does.
    The other conditions are shared with ``conditions`` (neither is mutated; the service copies
    what it is given)."""
    out = [c for c in conditions if c.get("type") != type_]
    old = next((c for c in conditions if c.get("type") == type_), None)
    cond: Obj = {"type": type_, "status": status}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    if probe:
        cond["lastProbeTime"] = now
    cond["lastTransitionTime"] = old["lastTransitionTime"] if old and old.get("status") == status and old.get("lastTransitionTime") else now
    index = next((i for i, c in enumerate(conditions) if c.get("type") == type_), len(out))
    out.insert(index, cond)
    return out


def _replicas(runtime: Obj) -> int:
    value = runtime.get("spec", {}).get("replicas", 1)
    return max(0, value) if isinstance(value, int) and not isinstance(value, bool) else 1


def _capacity_annotations(runtime: Obj) -> dict[str, str]:
    resources = (runtime.get("spec", {}).get("capacity") or {}).get("resources") or {}
    return {f"{CAPACITY_PREFIX}{k}": str(v) for k, v in resources.items()} if isinstance(resources, dict) else {}


def _owner_uid(pod: Obj) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Runtime" and str(ref.get("apiVersion", "")).startswith(KRUNTIMES_GROUP + "/") and ref.get("controller"):
            return str(ref.get("uid"))
    return None


Key = tuple[str, str]
"""(namespace, name)."""

_BATCH: Final = 0.05
"""Seconds the simulator lets heartbeats and retries that fall due gather before a pass writes them."""
_RUN_PRECISION: Final = 0.001
"""The least wait for a Run's end: a Run finishes within about this much of its duration."""

_RETRY: Final = 1.0
"""Seconds before a Runtime whose reconcile failed for a reason no event will announce is tried again."""


@final
@dataclass(slots=True)
class SimulatorCounters:
    """Work done so far, for tests and benchmarks that check a pass costs O(changes)."""

    passes: int = 0
    run_events: int = 0
    """Run events taken from the commit feed (each looked at once, without a store read)."""
    runs_examined: int = 0
    """Runs read from the store and acted on (dirty ones and due timers)."""
    pods_examined: int = 0
    runtimes_reconciled: int = 0


def _is_active_run(obj: Obj) -> bool:
    status = obj.get("status") or {}
    return bool(status.get("assignedPod")) and status.get("phase") in ("Scheduled", "Running")


def _pod_signature(pod: Obj) -> tuple[object, ...]:
    """What a Runtime's reconcile depends on; a heartbeat changes none of it."""
    meta = pod["metadata"]
    return (_owner_uid(pod), pod.get("status", {}).get("phase"), meta.get("deletionTimestamp"), meta.get("annotations"))


def _owner_name(pod: Obj) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Runtime" and str(ref.get("apiVersion", "")).startswith(KRUNTIMES_GROUP + "/") and ref.get("controller"):
            return str(ref.get("name", ""))
    return None


@final
class RuntimeSimulator:
    """Reconciles Runtimes into Runtime Pods on a background thread (see the module docstring)."""

    def __init__(self, service: ObjectService, settings: SimulatorSettings = SimulatorSettings(), *, clock: Callable[[], float] = time.time) -> None:
        self._service = service
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sub: Subscription | None = None
        self._resync = True
        self._last_beat: dict[Key, float] = {}
        self._paused: set[Key] = set()
        self.counters = SimulatorCounters()
        # what the commit feed marked, processed (re-read from the store) by the next pass
        self._dirty_pods: set[Key] = set()
        self._dirty_runtimes: set[Key] = set()
        self._dirty_runs: set[Key] = set()
        # controller-owned pods by the Runtime named in their owner reference, and what was last seen of them
        self._owned: dict[Key, set[Key]] = {}
        self._pod_owner: dict[Key, Key] = {}
        self._pod_sig: dict[Key, tuple[object, ...]] = {}
        self._ours: set[Key] = set()
        # timers: (due on the monotonic clock, sequence, kind, key); an entry counts only while _due holds its time.
        # Heartbeats and retries wait in batches of at least _BATCH; a Run's end is kept to the millisecond.
        self._timers: list[tuple[float, int, str, Key]] = []
        self._run_timers: list[tuple[float, int, str, Key]] = []
        self._due: dict[tuple[str, Key], float] = {}
        self._seq = 0
        self._run_uid: dict[Key, str] = {}
        self._waiting: dict[Key, set[Key]] = {}
        """Active Runs bound to a pod that is not a live simulated one (yet), by that pod."""

    # -- control ------------------------------------------------------------------------

    def _resources(self) -> list[GroupResource]:
        return [RUNTIMES, PODS] + ([RUNS] if self.settings.execute_runs is not None else [])

    def start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            self._sub = self._service.store.subscribe(self._resources(), since=self._service.store.resource_version)
            self._resync = True
        self._stop.clear()

        def loop() -> None:
            try:
                while not self._stop.is_set():
                    try:
                        wait = self.reconcile()
                    except Exception:  # keep simulating; a bug here must not silently freeze the pods
                        traceback.print_exc(file=sys.stderr)
                        wait = 1.0
                    sub = self._sub
                    if sub is None:
                        return
                    item = sub.get(wait)
                    if item is not None:
                        with self._lock:
                            self._note(item)
            finally:
                with self._lock:
                    sub, self._sub = self._sub, None
                if sub is not None:
                    self._service.store.unsubscribe(sub)

        self._thread = threading.Thread(target=loop, name="devcluster-simulator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            sub = self._sub
            if sub is not None:
                sub.close()
            thread.join()

    def pause_heartbeat(self, namespace: str, pod: str) -> None:
        """Stop refreshing one pod's heartbeat (it goes stale after the scheduler's staleAfter)."""
        with self._lock:
            self._paused.add((namespace, pod))

    def resume_heartbeat(self, namespace: str, pod: str) -> None:
        with self._lock:
            key = (namespace, pod)
            self._paused.discard(key)
            self._last_beat.pop(key, None)
            if key in self._ours:
                self._schedule("beat", key, time.monotonic())

    # -- the commit feed ----------------------------------------------------------------

    def _note(self, item: Delivery | Bookmark) -> None:
        if not isinstance(item, Delivery):
            return
        event = item.event
        obj = event.object
        meta = obj["metadata"]
        key = (str(meta.get("namespace", "")), str(meta["name"]))
        if event.resource == PODS:
            self._dirty_pods.add(key)
        elif event.resource == RUNTIMES:
            self._dirty_runtimes.add(key)
        elif event.resource == RUNS:
            self.counters.run_events += 1
            # Only a Run bound and not finished can need us; a Pending one costs this look and nothing else.
            if item.type != "DELETED" and _is_active_run(obj):
                self._dirty_runs.add(key)

    def _drain(self) -> None:
        sub = self._sub
        if sub is None:
            self._resync = True  # not started: every pass is a full one, as a plain reconcile
            return
        if sub.closed and not self._stop.is_set():
            # Cut off (fell behind, or a fault dropped the watches): events may be lost, so start over from a full listing.
            self._service.store.unsubscribe(sub)
            self._sub = self._service.store.subscribe(self._resources(), since=self._service.store.resource_version)
            self._resync = True
            return
        for item in sub.drain():
            self._note(item)

    def _full_listing(self) -> None:
        store = self._service.store
        for resource, dirty in ((RUNTIMES, self._dirty_runtimes), (PODS, self._dirty_pods)):
            objs, _ = store.list_objects(resource)
            dirty.update((str(o["metadata"].get("namespace", "")), str(o["metadata"]["name"])) for o in objs)
        # pods and runtimes that went away unseen
        self._dirty_pods.update(self._pod_owner)
        self._dirty_runtimes.update(self._owned)
        if self.settings.execute_runs is not None:
            runs, _ = store.list_objects(RUNS)
            self._dirty_runs.update((str(r["metadata"]["namespace"]), str(r["metadata"]["name"])) for r in runs if _is_active_run(r))

    # -- timers -------------------------------------------------------------------------

    def _schedule(self, kind: str, key: Key, due: float) -> None:
        self._due[(kind, key)] = due
        self._seq += 1
        heapq.heappush(self._run_timers if kind == "run" else self._timers, (due, self._seq, kind, key))

    def _cancel(self, kind: str, key: Key) -> None:
        self._due.pop((kind, key), None)

    def _due_timers(self, now: float) -> list[tuple[str, Key]]:
        """The live timers due by ``now``, in the order they fell due."""
        out: list[tuple[float, int, str, Key]] = []
        for timers in (self._timers, self._run_timers):
            while timers and timers[0][0] <= now:
                entry = heapq.heappop(timers)
                due, _, kind, key = entry
                if self._due.get((kind, key)) == due:
                    del self._due[(kind, key)]
                    out.append(entry)
        out.sort()
        return [(kind, key) for _, _, kind, key in out]

    def _first_live(self, timers: list[tuple[float, int, str, Key]]) -> float | None:
        while timers and self._due.get((timers[0][2], timers[0][3])) != timers[0][0]:
            heapq.heappop(timers)  # superseded or cancelled
        return timers[0][0] if timers else None

    def _wait(self, now: float) -> float:
        """Seconds to wait for the commit feed before the next pass: until the next Run ends (a Run's
        end is what a runtime reports when it happens, and a late one holds its slot), or the next
        heartbeat or retry but no less than :data:`_BATCH`, so that heartbeats are written in
        batches, and never more than a second."""
        wait = 1.0
        beat = self._first_live(self._timers)
        if beat is not None:
            wait = min(wait, max(_BATCH, beat - now))
        run = self._first_live(self._run_timers)
        if run is not None:
            wait = min(wait, max(_RUN_PRECISION, run - now))
        return wait

    # -- one pass -----------------------------------------------------------------------

    def _rd(self, resource: GroupResource) -> ResourceDef | None:
        return self._service.registry.storage(resource)

    def reconcile(self) -> float:
        """One pass over what changed and what is due; returns the seconds until the next timed action."""
        with self._lock:
            self.counters.passes += 1
            runtime_rd, pod_rd = self._rd(RUNTIMES), self._rd(PODS)
            if runtime_rd is None or pod_rd is None:
                return 1.0
            self._drain()
            if self._resync:
                self._resync = False
                self._full_listing()
            pods, self._dirty_pods = self._dirty_pods, set()
            for key in sorted(pods):
                self._observe_pod(key)
            runtimes, self._dirty_runtimes = self._dirty_runtimes, set()
            for key in sorted(runtimes):
                self._reconcile_key(runtime_rd, pod_rd, key)
            now = time.monotonic()
            run_rd = self._rd(RUNS)
            for kind, key in self._due_timers(now):
                if kind == "beat":
                    if self._heartbeat(pod_rd, key, now) and self.settings.yield_after_beat:
                        time.sleep(0)
                elif kind == "runtime":
                    self._reconcile_key(runtime_rd, pod_rd, key)
                elif kind == "run" and run_rd is not None:
                    self._finish_run(run_rd, key, now)
            if self.settings.execute_runs is not None and run_rd is not None:
                runs, self._dirty_runs = self._dirty_runs, set()
                for key in sorted(runs):
                    self._start_run(run_rd, key, now)
            return self._wait(time.monotonic())

    @staticmethod
    def _guard(action: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs) -> bool:
        try:
            action(*args, **kwargs)
        except ApiError:
            return False  # conflict / not found / gone namespace: the change that caused it wakes the key again
        return True

    # -- pods and runtimes --------------------------------------------------------------

    def _live_owner(self, pod: Obj) -> bool:
        """The pod's controller Runtime exists with the uid the pod names."""
        name, uid = _owner_name(pod), _owner_uid(pod)
        if name is None or uid is None:
            return False
        runtime = self._service.store.read(RUNTIMES, ObjectKey(str(pod["metadata"]["namespace"]), name))
        return runtime is not None and str(runtime["metadata"]["uid"]) == uid and not runtime["metadata"].get("deletionTimestamp")

    def _observe_pod(self, key: Key) -> None:
        """Index one changed pod; wake its Runtime only when something it reconciles changed."""
        self.counters.pods_examined += 1
        pod = self._service.store.read(PODS, ObjectKey(*key))
        owner = (key[0], name) if pod is not None and (name := _owner_name(pod)) is not None else None
        previous = self._pod_owner.get(key)
        if previous is not None and previous != owner:
            self._owned.get(previous, set()).discard(key)
            self._dirty_runtimes.add(previous)
        if owner is None or pod is None:
            self._pod_owner.pop(key, None)
            self._pod_sig.pop(key, None)
            self._ours.discard(key)
            self._cancel("beat", key)
            self._last_beat.pop(key, None)
            return
        self._pod_owner[key] = owner
        self._owned.setdefault(owner, set()).add(key)
        signature = _pod_signature(pod)
        if self._pod_sig.get(key) != signature:
            self._pod_sig[key] = signature
            self._dirty_runtimes.add(owner)
        ours = pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp") and self._live_owner(pod)
        if not ours:
            self._ours.discard(key)
            self._cancel("beat", key)
            return
        if key not in self._ours:
            self._ours.add(key)
            self._dirty_runs.update(self._waiting.pop(key, ()))
        if ("beat", key) not in self._due:
            last = self._last_beat.get(key)
            self._schedule("beat", key, time.monotonic() if last is None else last + self._interval())

    def _interval(self) -> float:
        return max(0.05, self.settings.heartbeat_interval)

    def _reconcile_key(self, runtime_rd: ResourceDef, pod_rd: ResourceDef, key: Key) -> None:
        self.counters.runtimes_reconciled += 1
        store = self._service.store
        runtime = store.read(RUNTIMES, ObjectKey(*key))
        pods = [p for k in sorted(self._owned.get(key, ())) if (p := store.read(PODS, ObjectKey(*k))) is not None]
        uid = str(runtime["metadata"]["uid"]) if runtime is not None else None
        ok = True
        for pod in pods:
            if _owner_uid(pod) != uid:
                ok = self._guard(self._delete_pod, pod_rd, pod) and ok  # owned by a Runtime that is gone
        if runtime is not None:
            ok = self._guard(self._reconcile_runtime, runtime_rd, pod_rd, runtime, [p for p in pods if _owner_uid(p) == uid]) and ok
        if not self._owned.get(key):
            self._owned.pop(key, None)
        if not ok:
            self._schedule("runtime", key, time.monotonic() + _RETRY)

    def _heartbeat(self, pod_rd: ResourceDef, key: Key, now: float) -> bool:
        """Refresh one pod's heartbeat when it is due; ``True`` when a write was made."""
        if key not in self._ours:
            return False
        self._schedule("beat", key, now + self._interval())
        if key in self._paused:
            return False
        pod = self._service.store.read(PODS, ObjectKey(*key))
        if pod is None or pod["metadata"].get("deletionTimestamp") or pod.get("status", {}).get("phase") != "Running":
            return False
        self._guard(self._write_pod_status, pod_rd, pod)
        self._last_beat[key] = now
        return True

    # -- Runs ---------------------------------------------------------------------------

    def _active_run(self, key: Key) -> Obj | None:
        """The Run if it is bound to a live simulated pod and not finished; parks it by its pod otherwise."""
        self.counters.runs_examined += 1
        run = self._service.store.read(RUNS, ObjectKey(*key))
        if run is None or not _is_active_run(run):
            self._cancel("run", key)
            self._run_uid.pop(key, None)
            return None
        pod = (key[0], str(run["status"]["assignedPod"]))
        if pod not in self._ours:
            self._waiting.setdefault(pod, set()).add(key)
            self._cancel("run", key)
            self._run_uid.pop(key, None)
            return None
        return run

    def _start_run(self, run_rd: ResourceDef, key: Key, now: float) -> None:
        duration = self.settings.execute_runs
        run = self._active_run(key)
        if run is None or duration is None:
            return
        uid = str(run["metadata"]["uid"])
        if run["status"]["phase"] == "Scheduled":
            self._guard(self._set_run_phase, run_rd, run, "Running")
            self._run_uid[key] = uid
            self._schedule("run", key, now + duration)
        elif ("run", key) not in self._due or self._run_uid.get(key) != uid:
            # Running when we first see it (a restart, or a pod that came back): its time starts now.
            self._run_uid[key] = uid
            self._schedule("run", key, now + duration)

    def _finish_run(self, run_rd: ResourceDef, key: Key, now: float) -> None:
        run = self._active_run(key)
        if run is None:
            return
        if str(run["metadata"]["uid"]) != self._run_uid.get(key):
            self._start_run(run_rd, key, now)  # a new Run under the same name
            return
        if run["status"]["phase"] == "Scheduled":
            self._start_run(run_rd, key, now)  # the Running write was lost to a conflict and not yet retried
            return
        if self._guard(self._set_run_phase, run_rd, run, "Succeeded"):
            self._run_uid.pop(key, None)
        else:
            self._schedule("run", key, now + 0.05)

    def _context(self, verb: str, subresource: str = "") -> WriteContext:
        return WriteContext(verb, subresource, USER_AGENT)

    def _reconcile_runtime(self, runtime_rd: ResourceDef, pod_rd: ResourceDef, runtime: Obj, owned: list[Obj]) -> None:
        meta = runtime["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        desired = 0 if meta.get("deletionTimestamp") else _replicas(runtime)
        wanted = {f"{name}-{i}" for i in range(desired)}
        have = {p["metadata"]["name"]: p for p in owned}
        annotations = _capacity_annotations(runtime)
        for pod_name in sorted(wanted - have.keys()):
            self._guard(self._create_pod, pod_rd, runtime, pod_name, annotations)
        for pod_name, pod in have.items():
            if pod_name not in wanted:
                self._guard(self._delete_pod, pod_rd, pod)
                continue
            self._guard(self._sync_pod, pod_rd, runtime, pod, annotations)
        ready = sum(1 for n, p in have.items() if n in wanted and p.get("status", {}).get("phase") == "Running")
        status = {**(runtime.get("status") or {}), "readyReplicas": ready}
        if status != runtime.get("status"):
            body = {**runtime, "status": status}
            self._guard(self._service.update, runtime_rd, namespace, name, body, self._context("update", "status"))

    def _create_pod(self, pod_rd: ResourceDef, runtime: Obj, pod_name: str, annotations: Mapping[str, str]) -> None:
        meta = runtime["metadata"]
        template = runtime.get("spec", {}).get("template") or {}
        template_meta = template.get("metadata") or {}
        spec = json_copy(template.get("spec") or {})
        containers = spec.get("containers") or [{"name": "runtime", "image": "kruntimes/runtime:devcluster"}]
        # the upstream controller adds the runtimed sidecar to the template's containers
        spec["containers"] = [*containers, {"name": "runtimed", "image": "kruntimes/runtimed:devcluster"}]
        spec.setdefault("nodeName", "devcluster-node")
        spec.setdefault("restartPolicy", "Always")
        pod: Obj = {
            "metadata": {
                "name": pod_name,
                "namespace": meta["namespace"],
                "labels": {**(template_meta.get("labels") or {}), "runtime": meta["name"], **MANAGED_BY},
                "annotations": {**(template_meta.get("annotations") or {}), **annotations},
                "ownerReferences": [
                    {"apiVersion": runtime["apiVersion"], "kind": "Runtime", "name": meta["name"], "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
                ],
            },
            "spec": spec,
        }
        created = self._service.create(pod_rd, str(meta["namespace"]), pod, self._context("create"))
        self._write_pod_status(pod_rd, created, force_beat=True)

    def _delete_pod(self, pod_rd: ResourceDef, pod: Obj) -> None:
        meta = pod["metadata"]
        self._service.delete(pod_rd, str(meta["namespace"]), str(meta["name"]), self._context("delete"), preconditions={"uid": meta["uid"]})
        self._last_beat.pop((str(meta["namespace"]), str(meta["name"])), None)

    def _sync_pod(self, pod_rd: ResourceDef, runtime: Obj, pod: Obj, annotations: Mapping[str, str]) -> None:
        meta = pod["metadata"]
        current = {k: v for k, v in (meta.get("annotations") or {}).items()}
        merged = {k: v for k, v in current.items() if not k.startswith(CAPACITY_PREFIX)} | dict(annotations)
        if merged != current:
            body = json_copy(pod)
            body["metadata"]["annotations"] = merged
            pod = self._service.update(pod_rd, str(meta["namespace"]), str(meta["name"]), body, self._context("update"))
        if pod.get("status", {}).get("phase") != "Running":
            self._write_pod_status(pod_rd, pod, force_beat=True)

    def _write_pod_status(self, pod_rd: ResourceDef, pod: Obj, *, force_beat: bool = False) -> None:
        """Running + Ready + a fresh heartbeat; the whole status so a Pending pod becomes usable in one write."""
        meta = pod["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        now_s = rfc3339(self._clock())
        status = dict(pod.get("status") or {})  # the keys set below are replaced, not mutated
        started = status.get("startTime") or now_s
        conditions = list(status.get("conditions") or [])
        for type_ in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
            conditions = set_condition(conditions, type_, "True", now_s)
        paused = key in self._paused
        if not paused or force_beat:
            conditions = set_condition(conditions, HEARTBEAT, "True", now_s, reason="Heartbeat", message="runtimed is serving", probe=True)
        status.update(
            phase="Running",
            conditions=conditions,
            startTime=started,
            hostIP="127.0.0.1",
            podIP="127.0.0.1",
            containerStatuses=[
                {"name": c.get("name", ""), "ready": True, "started": True, "restartCount": 0, "image": c.get("image", ""), "imageID": "", "state": {"running": {"startedAt": started}}}
                for c in pod.get("spec", {}).get("containers") or []
            ],
        )
        if status == pod.get("status"):
            return
        body = {**pod, "status": status}
        self._service.update(pod_rd, key[0], key[1], body, self._context("update", "status"))
        self._last_beat[key] = time.monotonic()

    def _set_run_phase(self, run_rd: ResourceDef, run: Obj, phase: str) -> None:
        now_s = rfc3339(self._clock())
        status: dict[str, Any] = json_copy(run.get("status") or {})
        conditions = list(status.get("conditions") or [])
        pod = status.get("assignedPod", "")
        if phase == "Running":
            conditions = set_condition(conditions, "Running", "True", now_s, reason="Started", message=f"running on runtime pod {pod}")
        else:
            conditions = set_condition(conditions, "Running", "False", now_s, reason="Completed", message="run finished")
            conditions = set_condition(conditions, "Completed", "True", now_s, reason="Succeeded", message="run succeeded")
            status["completionTime"] = now_s
        status.update(phase=phase, conditions=conditions)
        meta = run["metadata"]
        self._service.update(run_rd, str(meta["namespace"]), str(meta["name"]), {**run, "status": status}, self._context("update", "status"))
