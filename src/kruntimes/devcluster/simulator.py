"""The runtime simulator's in-process driver: what the kruntimes Runtime controller and runtimed would do, on the dev cluster.

For every ``Runtime`` it keeps ``spec.replicas`` Runtime Pods named
``<runtime>-<n>`` from its ``spec.template`` plus a ``runtimed`` container (labels ``runtime=<name>``, capacity annotations
``kruntimes.io/capacity.<resource>``, owned by the Runtime), marks them
Running and Ready, and refreshes the ``kruntimes.io/RuntimedReady``
heartbeat's ``lastProbeTime``. Optionally it executes Runs bound to its pods:
Scheduled -> Running -> Succeeded (or Failed) after a fixed duration, or Cancelled when asked.
What to write and when is decided by ``kruntimes.runtimesim.decide``, which the API client
(``kruntimes runtime-sim``) shares; this module is how the dev cluster carries it out cheaply.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, ParamSpec, final

from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.resources import KRUNTIMES_GROUP, ResourceDef
from kruntimes.devcluster.service import ObjectService
from kruntimes.devcluster.store import Bookmark, Delivery, Subscription, WriteContext
from kruntimes.devcluster.times import rfc3339
from kruntimes.devcluster.types import GroupResource, ObjectKey, Obj
from kruntimes.runtimesim import decide
from kruntimes.runtimesim.decide import HEARTBEAT, set_condition

__all__ = ["HEARTBEAT", "PODS", "RUNS", "RUNTIMES", "USER_AGENT", "RuntimeSimulator", "SimulatorCounters", "SimulatorSettings", "set_condition"]

_P = ParamSpec("_P")

USER_AGENT: Final = "kruntimes-devcluster/simulator"
RUNTIMES: Final = GroupResource(KRUNTIMES_GROUP, "runtimes")
RUNS: Final = GroupResource(KRUNTIMES_GROUP, "runs")
PODS: Final = GroupResource("", "pods")
STYLE: Final = decide.PodStyle(
    manager="kruntimes-devcluster", runtime_image="kruntimes/runtime:devcluster", runtimed_image="kruntimes/runtimed:devcluster", node_name="devcluster-node"
)


@final
@dataclass(frozen=True, slots=True)
class SimulatorSettings:
    heartbeat_interval: float = 5.0
    """Seconds between heartbeats (lastProbeTime has whole-second precision, so below 1 s it moves once a second)."""
    execute_runs: float | None = None
    """Seconds a Run assigned to a simulated pod takes from Running to Succeeded; None leaves Runs alone."""
    fail_percent: int = 0
    """The share of executed Runs (0..100, chosen by UID) that end Failed instead of Succeeded."""
    yield_after_beat: bool = False
    """Let go of the interpreter (``time.sleep(0)``) after each heartbeat written. The pods stand for
    kubelets and runtime daemons on other machines, whose heartbeats reach a real API server as
    requests among all the others; a wave of them written as one loop holds back every request
    thread of the server for the whole wave. Only for a server that has a process of its own and
    quick interpreter turns (``kruntimes dev-cluster``): with CPython's default turns each yield may
    cost the loop a whole turn, enough to delay a leader's takeover in an in-process cluster under
    load (docs/performance.md, "Design measurements")."""


def _owner_uid(pod: Obj) -> str | None:
    owner = decide.controller_of(pod)
    return None if owner is None else owner.uid


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


_is_active_run: Final = decide.is_active


def _pod_signature(pod: Obj) -> tuple[object, ...]:
    """What a Runtime's reconcile depends on; a heartbeat changes none of it."""
    meta = pod["metadata"]
    return (_owner_uid(pod), pod.get("status", {}).get("phase"), meta.get("deletionTimestamp"), meta.get("annotations"))


def _owner_name(pod: Obj) -> str | None:
    owner = decide.controller_of(pod)
    return None if owner is None else owner.name


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
        self._run_started: dict[Key, tuple[str, float]] = {}
        """(uid, when its execution started on the monotonic clock) of the Runs being executed."""
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
                    self._run(run_rd, key, now)
            if self.settings.execute_runs is not None and run_rd is not None:
                runs, self._dirty_runs = self._dirty_runs, set()
                for key in sorted(runs):
                    self._run(run_rd, key, now)
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
        ok = True
        if runtime is None:
            for pod in pods:
                ok = self._guard(self._delete_pod, pod_rd, pod) and ok  # owned by a Runtime that is gone
        else:
            ok = self._reconcile_runtime(runtime_rd, pod_rd, runtime, pods)
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

    def _run(self, run_rd: ResourceDef, key: Key, now: float) -> None:
        """Carry out ``decide.run_step`` for one Run (on its event or its timer)."""
        duration = self.settings.execute_runs
        if duration is None:
            return
        self.counters.runs_examined += 1
        run = self._service.store.read(RUNS, ObjectKey(*key))
        if run is None:
            self._forget_run(key)
            return
        uid = str(run["metadata"]["uid"])
        remembered = self._run_started.get(key)
        started = remembered[1] if remembered is not None and remembered[0] == uid else None
        pod = (key[0], decide.assignment(run)[0])
        settings = decide.RunSettings(duration, self.settings.fail_percent)
        step = decide.run_step(run, pod_live=pod in self._ours, started=started, now=now, settings=settings)
        if isinstance(step, decide.Ignore):
            self._forget_run(key)
        elif isinstance(step, decide.Park):
            self._waiting.setdefault(pod, set()).add(key)
            self._forget_run(key)
        elif isinstance(step, decide.Wait):
            self._run_started[key] = (uid, step.started)
            if self._due.get(("run", key)) != step.until:
                self._schedule("run", key, step.until)
        elif self._guard(self._set_run_phase, run_rd, run, step.phase):
            if step.started is None:
                self._forget_run(key)
            else:
                self._run_started[key] = (uid, step.started)
                self._schedule("run", key, step.started + duration)
        else:
            self._schedule("run", key, now + 0.05)  # a conflict's event may come first; if not, this retries

    def _forget_run(self, key: Key) -> None:
        self._cancel("run", key)
        self._run_started.pop(key, None)

    def _context(self, verb: str, subresource: str = "") -> WriteContext:
        return WriteContext(verb, subresource, USER_AGENT)

    def _reconcile_runtime(self, runtime_rd: ResourceDef, pod_rd: ResourceDef, runtime: Obj, owned: list[Obj]) -> bool:
        """Carry out ``decide.plan_fleet`` for one Runtime; ``False`` when a write failed."""
        meta = runtime["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        fleet = decide.fleet_of_runtime(runtime)
        pods = {str(p["metadata"]["name"]): p for p in owned}
        plan = decide.plan_fleet(fleet, pods)
        ok = True
        for pod_name in plan.delete:
            ok = self._guard(self._delete_pod, pod_rd, pods[pod_name]) and ok
        for pod_name in plan.create:
            ok = self._guard(self._create_pod, pod_rd, fleet, pod_name) and ok
        for pod_name, annotations in plan.annotate:
            body = {**pods[pod_name], "metadata": {**pods[pod_name]["metadata"], "annotations": dict(annotations)}}
            try:
                pods[pod_name] = self._service.update(pod_rd, namespace, pod_name, body, self._context("update"))
            except ApiError:
                ok = False
        for pod_name in plan.start:
            ok = self._guard(self._write_pod_status, pod_rd, pods[pod_name], force_beat=True) and ok
        status = decide.runtime_status(runtime, decide.ready_replicas(fleet, pods))
        if status is not None:
            ok = self._guard(self._service.update, runtime_rd, namespace, name, {**runtime, "status": status}, self._context("update", "status")) and ok
        return ok

    def _create_pod(self, pod_rd: ResourceDef, fleet: decide.Fleet, pod_name: str) -> None:
        created = self._service.create(pod_rd, fleet.namespace, decide.pod_manifest(fleet, pod_name, STYLE), self._context("create"))
        self._write_pod_status(pod_rd, created, force_beat=True)

    def _delete_pod(self, pod_rd: ResourceDef, pod: Obj) -> None:
        meta = pod["metadata"]
        self._service.delete(pod_rd, str(meta["namespace"]), str(meta["name"]), self._context("delete"), preconditions={"uid": meta["uid"]})
        self._last_beat.pop((str(meta["namespace"]), str(meta["name"])), None)

    def _write_pod_status(self, pod_rd: ResourceDef, pod: Obj, *, force_beat: bool = False) -> None:
        """``decide.pod_status``: Running + Ready + a fresh heartbeat unless it is paused."""
        meta = pod["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        status = decide.pod_status(pod, rfc3339(self._clock()), beat=force_beat or key not in self._paused)
        if status is None:
            return
        self._service.update(pod_rd, key[0], key[1], {**pod, "status": status}, self._context("update", "status"))
        self._last_beat[key] = time.monotonic()

    def _set_run_phase(self, run_rd: ResourceDef, run: Obj, phase: str) -> None:
        meta = run["metadata"]
        status = decide.run_status(run, phase, rfc3339(self._clock()))
        self._service.update(run_rd, str(meta["namespace"]), str(meta["name"]), {**run, "status": status}, self._context("update", "status"))
