"""The runtime simulator as an API client: ``decide``'s decisions carried out over HTTP, on any server.

Three caches (``watching.Reflector``) keep the namespace's Runs, the simulator's own pods (those
labelled ``app.kubernetes.io/managed-by=<manager>``: no other pod is ever seen, so none is ever
touched) and, when it follows them, the namespace's Runtimes. A change queues a key on a work
queue with client-go's semantics (``kruntimes.kubeclient.workqueue``: coalesced, one worker per key
at a time, delayed and backed-off requeues), and ``workers`` threads carry the keys out:

- ``("fleet", runtime)`` (named on the command line) and ``("runtime", name)`` (a Runtime
  object): ``decide.plan_fleet`` (delete, create, re-annotate pods) and a Runtime's
  ``readyReplicas``. A fleet only ever touches pods of its own ``runtime`` label (or, for a
  Runtime, its own controller reference), so two simulators for different runtimes can share a
  namespace. A pod name taken by a pod that is not the simulator's is skipped, never adopted.
- ``("pod", name)``: ``decide.pod_status``: Running and Ready at once, the heartbeat when due;
  requeued for the next heartbeat.
- ``("run", name)``: ``decide.run_step``; requeued for the Run's end.

How it writes: statuses through the ``status`` subresource, as JSON merge patches carrying the
``resourceVersion`` that was read (a precondition: a newer version answers 409), deletes with the
pod's UID as a precondition and no grace period (the simulator plays the kubelet that would
confirm it). A 409 is followed by a fresh GET, and the key is processed again from what it
returned, with the key's back-off. Every request first takes a token from one bucket (``qps``,
``burst``). A transient failure (5xx, 429, a timeout, a lost connection) backs the key off
exponentially (10 ms doubling to 30 s, at least the server's ``Retry-After``; a 429's
``Retry-After`` holds every writer); a refusal (403, 422...) is logged at most once a minute per
kind and retried with the same back-off. ``stop()`` ends it: no request is started afterwards,
and the one in flight finishes.

One module at about 770 lines: the simulator client's caches, pacing, write retries and progress
counters act on one client's state, and none is used without the others.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from returns.result import Failure, Result, Success

from kruntimes.kubeclient.kube import JSON_CONTENT, MERGE_PATCH, PODS, RUNS, ApiError, Kube, ResourceType
from kruntimes.kubeclient.threads import named_thread
from kruntimes.kubeclient.workqueue import ExponentialDelay, WorkQueue
from kruntimes.runtimesim import decide
from kruntimes.runtimesim.decide import Fleet, Obj
from kruntimes.runtimesim.watching import Reflector

log = logging.getLogger(__name__)

RUNTIMES: Final = ResourceType(decide.KRUNTIMES_GROUP, "v1alpha1", "runtimes")
MANAGER: Final = "kruntimes-runtime-sim"
"""The ``app.kubernetes.io/managed-by`` value of what the simulator creates."""
BATCH_LABEL: Final = "kruntimes.io/runtime-sim-batch"
"""Labels the Runs one ``kruntimes runtime-sim --create-runs`` made, so ``--cleanup`` deletes those only."""
USER_AGENT: Final = "kruntimes-runtime-sim"
KEY_BACKOFF: Final = ExponentialDelay(base=0.01, cap=30.0)
COMPLAINT_INTERVAL: Final = 60.0

KeyKind: TypeAlias = Literal["fleet", "runtime", "pod", "run"]
Key: TypeAlias = tuple[KeyKind, str]


def style(manager: str = MANAGER) -> decide.PodStyle:
    """The client's pods: gated, so that on a real cluster no scheduler binds them and no kubelet runs them."""
    return decide.PodStyle(
        manager=manager,
        runtime_image="kruntimes/runtime:runtime-sim",
        runtimed_image="kruntimes/runtimed:runtime-sim",
        scheduling_gate="kruntimes.io/runtime-sim",
    )


def rfc3339(epoch: float) -> str:
    """Whole seconds, as a real API server stores ``metav1.Time``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(epoch)))


@dataclass(frozen=True, slots=True)
class ClientSettings:
    namespace: str
    fleets: tuple[Fleet, ...] = ()
    """Fleets named on the command line (no Runtime object; their pods have no owner)."""
    follow_runtimes: bool = False
    """Also play the Runtime controller for every Runtime object of the namespace."""
    heartbeat_interval: float = 5.0
    """Seconds between heartbeats: a third of the scheduler's default ``staleAfter`` (15 s)."""
    runs: decide.RunSettings | None = decide.RunSettings(duration=1.0)
    """How bound Runs are executed; ``None`` leaves Runs alone."""
    qps: float = 50.0
    """Requests per second at most, over all threads (0: no limit). Each heartbeat, pod start and
    Run transition is one request, so 50 keeps 100 pods heart-beating every 5 s with room for
    25 Runs/s (two writes each)."""
    burst: int = 100
    workers: int = 4
    """Threads that write; requests overlap the server's latency."""
    manager: str = MANAGER


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved; ``take`` blocks for one (thread-safe)."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate
        self._burst = float(max(1, burst))
        self._tokens = self._burst
        self._clock = clock
        self._at = clock()
        self._held_until = 0.0
        self._stopped = False
        self._cond = threading.Condition()

    def take(self) -> bool:
        """One token, once there is one; ``False`` when stopped (the caller must not send)."""
        with self._cond:
            while True:
                if self._stopped:
                    return False
                wait = self._take_locked()
                if wait <= 0:
                    return True
                self._cond.wait(wait)

    def try_take(self) -> bool:
        """One token if there is one now."""
        with self._cond:
            return not self._stopped and self._take_locked() <= 0

    def _take_locked(self) -> float:
        """Take a token (and return 0), or return the seconds until one may be there."""
        if self._rate <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        wait = self._held_until - now
        if wait > 0:
            return wait
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self._rate

    def hold(self, seconds: float) -> None:
        """No token for anyone for ``seconds`` (a server's ``Retry-After`` on a 429)."""
        with self._cond:
            self._held_until = max(self._held_until, self._clock() + seconds)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


@dataclass(slots=True)
class Counters:
    """What the simulator did, for the progress line and tests."""

    requests: int = 0
    conflicts: int = 0
    errors: int = 0
    """Failed requests other than conflicts."""
    pods_created: int = 0
    pods_deleted: int = 0
    heartbeats: int = 0
    run_writes: Counter[str] = field(default_factory=Counter)
    """Run status writes by the phase written."""
    request_seconds: float = 0.0
    """Time spent waiting for answers, over all requests (not watches)."""


def _holding(run: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """(pod, ``runs`` requested) of an active Run; a request that is not a whole number counts 1."""
    if run is None or not decide.is_active(run):
        return None
    requests = ((run.get("spec") or {}).get("resources") or {}).get("requests") or {}
    value = requests.get("runs") if isinstance(requests, Mapping) else None
    count = int(value) if isinstance(value, str | int) and str(value).isdigit() and int(value) > 0 else 1
    return (decide.assignment(run)[0], count)


def phase_of(run: Mapping[str, Any] | None) -> str:
    """The Run's phase (an empty one is Pending); "" for no Run."""
    return "" if run is None else str((run.get("status") or {}).get("phase") or "Pending")


class RunTally:
    """The namespace's Runs by phase, and the transitions that make the rates (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.phases: Counter[str] = Counter()
        self.binds = 0
        """Runs seen going from Pending to bound."""
        self.ends = 0
        """Runs seen reaching a terminal phase."""
        self.batch = ""
        self.batch_ended = 0
        self.batch_last_end: float | None = None
        self._usage: Counter[str] = Counter()
        """The ``runs`` requests of the active Runs on each pod, in the order the watch told."""
        self.peak: Counter[str] = Counter()
        """The most ``runs`` ever active at once on each pod, as watched: a pod whose peak passes
        its capacity was overcommitted (the watch delivers every version, in commit order)."""
        self._seen: dict[str, float] = {}
        """When each Run was seen Pending, then bound (the watch's times on this machine)."""
        self.waits: list[float] = []
        """Seconds from a Run seen Pending to seen bound: the scheduler's latency, a slot's wait included."""
        self.starts: list[float] = []
        """Seconds from a Run seen bound to seen Running: the simulator's own reaction."""
        self.holds: list[float] = []
        """Seconds from a Run seen bound to seen ended: how long it held its slot."""

    def change(self, before: Obj | None, after: Obj | None) -> None:
        old, new = phase_of(before), phase_of(after)
        self._time(old, new, after)
        old_pod, new_pod = _holding(before), _holding(after)
        if old_pod != new_pod:
            with self._lock:
                if old_pod is not None:
                    self._usage[old_pod[0]] -= old_pod[1]
                if new_pod is not None:
                    self._usage[new_pod[0]] += new_pod[1]
                    self.peak[new_pod[0]] = max(self.peak[new_pod[0]], self._usage[new_pod[0]])
        if old == new:
            return
        with self._lock:
            if old:
                self.phases[old] -= 1
                if not self.phases[old]:
                    del self.phases[old]
            if new:
                self.phases[new] += 1
            if old == "Pending" and after is not None and decide.assignment(after)[0] and new in decide.ACTIVE_PHASES:
                self.binds += 1
            if old and old not in decide.TERMINAL_PHASES and new in decide.TERMINAL_PHASES:
                self.ends += 1
                labels = ((after or {}).get("metadata") or {}).get("labels") or {}
                if self.batch and labels.get(BATCH_LABEL) == self.batch:
                    self.batch_ended += 1
                    self.batch_last_end = self._clock()

    def _time(self, old: str, new: str, after: Obj | None) -> None:
        if old == new:
            return
        name = str(((after or {}).get("metadata") or {}).get("name", ""))
        now = self._clock()
        with self._lock:
            if after is None:
                return
            if new == "Pending":
                self._seen[name] = now
            elif old == "Pending" and new in decide.ACTIVE_PHASES:
                pending = self._seen.get(name)
                if pending is not None:
                    self.waits.append(now - pending)
                self._seen[name] = now
                if new == "Running":
                    self.starts.append(0.0)
            elif old == "Scheduled" and new == "Running":
                bound = self._seen.get(name)
                if bound is not None:
                    self.starts.append(now - bound)
            elif new in decide.TERMINAL_PHASES:
                bound = self._seen.pop(name, None)
                if bound is not None and old in decide.ACTIVE_PHASES:
                    self.holds.append(now - bound)

    def latencies(self) -> dict[str, list[float]]:
        """``waits``, ``starts`` and ``holds``, copied."""
        with self._lock:
            return {"Pending -> bound": list(self.waits), "bound -> Running": list(self.starts), "bound -> ended": list(self.holds)}

    def peaks(self) -> dict[str, int]:
        with self._lock:
            return dict(self.peak)

    def snapshot(self) -> tuple[dict[str, int], int, int, int]:
        """(count by phase, binds, ends, ends of the batch) at one instant."""
        with self._lock:
            return dict(self.phases), self.binds, self.ends, self.batch_ended


@dataclass(frozen=True, slots=True)
class Progress:
    pods_ready: int
    pods_wanted: int
    phases: Mapping[str, int]
    """The namespace's Runs by phase."""
    binds: int
    ends: int
    batch_ended: int
    requests: int
    conflicts: int
    errors: int


class SimulatorClient:
    """Plays the Runtime controller and runtimed in one namespace, over HTTP (see the module docstring)."""

    def __init__(self, kube: Kube, settings: ClientSettings, *, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.settings = settings
        self.namespace = settings.namespace
        self._clock = clock
        self._style = style(settings.manager)
        self._fleets = {f.runtime: f for f in settings.fleets}
        self.counters = Counters()
        self.tally = RunTally()
        self.queue: WorkQueue[Key] = WorkQueue(backoff=KEY_BACKOFF)
        self.limiter = TokenBucket(settings.qps, settings.burst)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._members: dict[Key, set[str]] = {}
        """The pods each fleet key owns, by name."""
        self._signature: dict[str, tuple[object, ...]] = {}
        self._beats: dict[str, float] = {}
        """When each pod's last heartbeat was written (monotonic)."""
        self._paused: set[str] = set()
        self._started: dict[str, tuple[str, float]] = {}
        """Run -> (uid, when its execution started, monotonic)."""
        self._parked: dict[str, set[str]] = {}
        self._parked_on: dict[str, str] = {}
        """Run -> the pod it is parked by (so a Run that ends elsewhere leaves no trace)."""
        """Pod -> the Runs bound to it while it was not live."""
        self._foreign: set[str] = set()
        self._complained: dict[tuple[int, str], float] = {}
        self.pods = Reflector(kube, PODS, self.namespace, self._pod_changed, label_selector=f"{decide.MANAGED_BY}={settings.manager}")
        self.runs = Reflector(kube, RUNS, self.namespace, self._run_changed)
        self.runtimes = Reflector(kube, RUNTIMES, self.namespace, self._runtime_changed) if settings.follow_runtimes else None
        self._workers: list[threading.Thread] = []
        kube.observe(self._observed)

    def _observed(self, method: str, status: int, seconds: float) -> None:
        with self._lock:
            self.counters.request_seconds += seconds

    # --- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        for reflector in self._reflectors():
            reflector.start()
        for runtime in self._fleets:
            self.queue.add(("fleet", runtime))
        for i in range(max(1, self.settings.workers)):
            worker = named_thread(self._work, f"sim-worker-{i}")
            worker.start()
            self._workers.append(worker)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop writing at once; wait (up to ``timeout``) for the request in flight to end."""
        self._stopped.set()
        self.limiter.stop()
        self.queue.shutdown()
        for reflector in self._reflectors():
            reflector.stop()
        deadline = time.monotonic() + timeout
        for thread in self._workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        for reflector in self._reflectors():
            reflector.join(max(0.0, deadline - time.monotonic()))

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(r.wait_synced(max(0.0, deadline - time.monotonic())) for r in self._reflectors())

    def pause_heartbeat(self, pod: str) -> None:
        """Stop refreshing one pod's heartbeat (it goes stale after the scheduler's ``staleAfter``)."""
        with self._lock:
            self._paused.add(pod)

    def resume_heartbeat(self, pod: str) -> None:
        with self._lock:
            self._paused.discard(pod)
            self._beats.pop(pod, None)
        self.queue.add(("pod", pod))

    def overcommitted(self) -> dict[str, tuple[int, int]]:
        """The simulator's pods that ever held more ``runs`` than their capacity, as watched:
        pod -> (peak, capacity). The capacity is the pod's annotation (2 when it has none, as
        the scheduler reads it)."""
        peaks = self.tally.peaks()
        over: dict[str, tuple[int, int]] = {}
        for pod in self.fleet_pods():
            name = str(pod["metadata"]["name"])
            annotation = str(((pod["metadata"].get("annotations") or {}).get(f"{decide.CAPACITY_PREFIX}runs")) or "2")
            capacity = int(annotation) if annotation.isdigit() else 2
            if peaks.get(name, 0) > capacity:
                over[name] = (peaks[name], capacity)
        return over

    def fleets_ready(self) -> bool:
        """Every pod the command-line fleets want is Ready."""
        with self._lock:
            members = {key: set(names) for key, names in self._members.items() if key[0] == "fleet"}
        for fleet in self._fleets.values():
            wanted = decide.pod_names(fleet)
            have = members.get(("fleet", fleet.runtime), set())
            if not all(n in self._foreign or (n in have and (p := self.pods.get(n)) is not None and decide.is_ready(p)) for n in wanted):
                return False
        return True

    def fleet_pods(self) -> list[Obj]:
        """The pods of the fleets this simulator runs."""
        with self._lock:
            names = [n for members in self._members.values() for n in members]
        return [p for n in names if (p := self.pods.get(n)) is not None]

    def progress(self) -> Progress:
        """What the progress line shows, read at one instant (each part consistent in itself)."""
        wanted = sum(f.replicas for f in self._fleets.values())
        if self.runtimes is not None:
            wanted += sum(decide.fleet_of_runtime(r).replicas for r in self.runtimes.values())
        ready = sum(1 for p in self.fleet_pods() if decide.is_ready(p))
        phases, binds, ends, batch_ended = self.tally.snapshot()
        with self._lock:
            counters = (self.counters.requests, self.counters.conflicts, self.counters.errors)
        return Progress(ready, wanted, phases, binds, ends, batch_ended, *counters)

    def _reflectors(self) -> list[Reflector]:
        return [r for r in (self.pods, self.runs, self.runtimes) if r is not None]

    # --- changes -> keys ------------------------------------------------------------------------

    def _fleet_key(self, pod: Mapping[str, Any]) -> Key | None:
        owner = decide.controller_of(pod)
        if owner is not None:
            return ("runtime", owner.name) if self.runtimes is not None else None
        runtime = str(((pod.get("metadata") or {}).get("labels") or {}).get(decide.RUNTIME_LABEL, ""))
        return ("fleet", runtime) if runtime in self._fleets else None

    def _pod_changed(self, name: str, before: Obj | None, after: Obj | None) -> None:
        old = None if before is None else self._fleet_key(before)
        new = None if after is None else self._fleet_key(after)
        with self._lock:
            if old is not None and old != new:
                self._members.get(old, set()).discard(name)
            if new is not None:
                self._members.setdefault(new, set()).add(name)
            signature = None if after is None else _signature(after)
            changed = self._signature.get(name) != signature
            if signature is None:
                self._signature.pop(name, None)
            else:
                self._signature[name] = signature
        for key in {old, new}:
            if key is not None and (changed or old != new):
                self.queue.add(key)
        if new is not None or old is not None:
            self.queue.add(("pod", name))

    def _run_changed(self, name: str, before: Obj | None, after: Obj | None) -> None:
        self.tally.change(before, after)
        if self.settings.runs is not None and any(o is not None and decide.is_active(o) for o in (before, after)):
            self.queue.add(("run", name))

    def _runtime_changed(self, name: str, before: Obj | None, after: Obj | None) -> None:
        self.queue.add(("runtime", name))

    # --- the workers ---------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            key = self.queue.get()
            if key is None:
                return
            try:
                done = self._process(key)
            except Exception:  # a bug in one key must not stop the others
                log.exception("simulating an object failed", extra={"kind": key[0], "object": key[1]})
                done = False
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)
            if done:
                self.queue.forget(key)

    def _process(self, key: Key) -> bool:
        """Carry out one key; ``True`` when it needs nothing more (its back-off starts over)."""
        kind, name = key
        if kind == "pod":
            return self._pod(name)
        if kind == "run":
            return self._run(name)
        return self._fleet(key)

    # --- fleets ------------------------------------------------------------------------------------

    def _fleet(self, key: Key) -> bool:
        kind, name = key
        runtime: Obj | None = None
        if not self.pods.wait_synced(0):
            self.queue.add_after(key, 0.1)
            return False
        if kind == "fleet":
            fleet = self._fleets[name]
        else:
            assert self.runtimes is not None
            if not self.runtimes.wait_synced(0):
                self.queue.add_after(key, 0.1)
                return False
            runtime = self.runtimes.get(name)
            # a Runtime that is gone wants none of the pods it controlled, whatever their owner's uid
            gone = Fleet(self.namespace, name, 0, (), decide.Owner(f"{decide.KRUNTIMES_GROUP}/v1alpha1", "Runtime", name, ""))
            fleet = decide.fleet_of_runtime(runtime) if runtime is not None else gone
        with self._lock:
            names = sorted(self._members.get(key, ()))
        pods = {n: p for n in names if (p := self.pods.get(n)) is not None}
        plan = decide.plan_fleet(fleet, pods)
        for pod_name in plan.delete:
            if not self._delete_pod(key, pods[pod_name]):
                return False
        for pod_name in plan.create:
            if pod_name not in self._foreign and not self._create_pod(key, fleet, pod_name):
                return False
        for pod_name, annotations in plan.annotate:
            pod = pods[pod_name]
            current = pod["metadata"].get("annotations") or {}
            patch = {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"], "annotations": decide.annotation_patch(current, annotations)}}
            if self._write(key, self.pods, PODS, pod, "PATCH", patch) is None:
                return False
        for pod_name in plan.start:
            self.queue.add(("pod", pod_name))
        if runtime is not None:
            status = decide.runtime_status(runtime, decide.ready_replicas(fleet, pods))
            if status is not None:
                body = {"metadata": {"resourceVersion": runtime["metadata"]["resourceVersion"]}, "status": status}
                assert self.runtimes is not None
                if self._write(key, self.runtimes, RUNTIMES, runtime, "PATCH", body, subresource="status") is None:
                    return False
        return True

    def _create_pod(self, key: Key, fleet: Fleet, name: str) -> bool:
        if not self.limiter.take():
            return False
        result = self._request("POST", PODS.path(self.namespace), decide.pod_manifest(fleet, name, self._style), JSON_CONTENT)
        if isinstance(result, Success):
            self._count("pods_created")
            self.pods.put(result.unwrap(), replacing=None)
            return True
        error = result.failure()
        if error.kind != "already_exists":
            self._failed(key, self.pods, PODS, name, error, read=None)
            return False
        # Ours from an earlier run, not yet in the cache, or someone else's: read it to know which.
        existing = self._read(PODS, name)
        if isinstance(existing, Success):
            pod = existing.unwrap()
            if ((pod.get("metadata") or {}).get("labels") or {}).get(decide.MANAGED_BY) == self.settings.manager:
                self.pods.put(pod, replacing=None)
                return True
            self._foreign.add(name)
            log.warning(
                "a pod of that name exists and is not the simulator's: left alone, the simulator runs without it",
                extra={"pod": f"{self.namespace}/{name}", "manager": self.settings.manager},
            )
            return True
        self.queue.add_rate_limited(key)
        return False

    def _delete_pod(self, key: Key, pod: Obj) -> bool:
        meta = pod["metadata"]
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        if self._write(key, self.pods, PODS, pod, "DELETE", options, content_type=JSON_CONTENT) is None:
            return False
        self._count("pods_deleted")
        return True

    # --- pods ------------------------------------------------------------------------------------------

    def _pod(self, name: str) -> bool:
        pod = self.pods.get(name)
        if pod is None or self._fleet_key(pod) is None or pod["metadata"].get("deletionTimestamp"):
            with self._lock:
                self._beats.pop(name, None)
            return True
        now = time.monotonic()
        interval = max(0.05, self.settings.heartbeat_interval)
        with self._lock:
            paused = name in self._paused
            last = self._beats.get(name)
        running = decide.is_running(pod)
        if not running or (not paused and (last is None or now - last >= interval)):
            status = decide.pod_status(pod, rfc3339(self._clock()), beat=not running or not paused)
            if status is not None:
                body = {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]}, "status": status}
                if self._write(("pod", name), self.pods, PODS, pod, "PATCH", body, subresource="status") is None:
                    return False
                self._count("heartbeats")
            last = now
            with self._lock:
                self._beats[name] = now
        with self._lock:
            parked = self._parked.pop(name, set())
            for run in parked:
                self._parked_on.pop(run, None)
        for run in parked:
            self.queue.add(("run", run))
        if not paused and last is not None:
            self.queue.add_after(("pod", name), max(0.01, last + interval - now))
        return True

    # --- Runs --------------------------------------------------------------------------------------------

    def _run(self, name: str) -> bool:
        run_settings = self.settings.runs
        run = self.runs.get(name)
        if run is None or run_settings is None:
            self._forget_run(name)
            return True
        uid = str(run["metadata"].get("uid", ""))
        pod_name = decide.assignment(run)[0]
        pod = self.pods.get(pod_name) if pod_name else None
        live = pod is not None and self._fleet_key(pod) is not None and decide.is_running(pod)
        now = time.monotonic()
        with self._lock:
            remembered = self._started.get(name)
        started = remembered[1] if remembered is not None and remembered[0] == uid else None
        step = decide.run_step(run, pod_live=live, started=started, now=now, settings=run_settings)
        if isinstance(step, decide.Ignore):
            self._forget_run(name)
            return True
        if isinstance(step, decide.Park):
            self._forget_run(name)
            with self._lock:
                self._parked.setdefault(step.pod, set()).add(name)
                self._parked_on[name] = step.pod
            return True
        if isinstance(step, decide.Wait):
            with self._lock:
                self._started[name] = (uid, step.started)
            self.queue.add_after(("run", name), step.until - now)
            return True
        body = {"metadata": {"resourceVersion": run["metadata"]["resourceVersion"]}, "status": decide.run_status(run, step.phase, rfc3339(self._clock()))}
        if self._write(("run", name), self.runs, RUNS, run, "PATCH", body, subresource="status") is None:
            return False
        self._count("run_writes", step.phase)
        if step.started is None:
            self._forget_run(name)
        else:
            with self._lock:
                self._started[name] = (uid, step.started)
            self.queue.add_after(("run", name), run_settings.duration)
        return True

    def _forget_run(self, name: str) -> None:
        with self._lock:
            self._started.pop(name, None)
            pod = self._parked_on.pop(name, None)
            if pod is not None:
                parked = self._parked.get(pod)
                if parked is not None:
                    parked.discard(name)
                    if not parked:
                        del self._parked[pod]

    # --- requests --------------------------------------------------------------------------------------

    def _count(self, what: str, phase: str = "") -> None:
        with self._lock:
            if phase:
                self.counters.run_writes[phase] += 1
            else:
                setattr(self.counters, what, getattr(self.counters, what) + 1)

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None, content_type: str) -> Result[Obj, ApiError]:
        self._count("requests")
        data = None if body is None else json.dumps(body).encode()
        return self.kube.request(method, path, body=data, content_type=content_type if data is not None else None)

    def _read(self, resource: ResourceType, name: str) -> Result[Obj, ApiError]:
        if not self.limiter.take():
            return Failure(ApiError("unreachable", 0, "", "stopped"))
        return self._request("GET", resource.path(self.namespace, name), None, JSON_CONTENT)

    def _write(
        self, key: Key, cache: Reflector, resource: ResourceType, obj: Obj, method: str, body: Mapping[str, Any],
        *, subresource: str = "", content_type: str = MERGE_PATCH,
    ) -> Obj | None:
        """One write of ``obj`` (as it was read); the answer, or ``None`` once what comes next for
        ``key`` is arranged."""
        if not self.limiter.take():
            return None
        meta = obj["metadata"]
        name, read = str(meta["name"]), str(meta.get("resourceVersion", ""))
        result = self._request(method, resource.path(self.namespace, name, subresource or None), body, content_type)
        if isinstance(result, Failure):
            self._failed(key, cache, resource, name, result.failure(), read=read)
            return None
        answer = result.unwrap()
        if method != "DELETE":
            cache.put(answer, replacing=read)
        return answer

    def _failed(self, key: Key, cache: Reflector, resource: ResourceType, name: str, error: ApiError, *, read: str | None) -> None:
        """What comes next for ``key`` after a write of ``name`` made from version ``read``
        (``None``: a create) failed."""
        if error.kind == "conflict" and read is not None:
            self._count("conflicts")
            fresh = self._read(resource, name)
            if isinstance(fresh, Success):
                cache.put(fresh.unwrap(), replacing=read)
            elif fresh.failure().kind == "not_found":
                cache.drop(name, replacing=read)
            self.queue.add_rate_limited(key)
            return
        if error.kind == "not_found" and read is not None:
            cache.drop(name, replacing=read)  # gone: its deletion is the next change of this key
            return
        self._count("errors")
        if error.kind == "throttled" and error.retry_after:
            self.limiter.hold(error.retry_after)
        if not error.retriable:
            self._complain(resource, error)
        self.queue.add_rate_limited(key, error.retry_after or 0.0)

    def _complain(self, resource: ResourceType, error: ApiError) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._complained.get((error.status, error.reason))
            if last is not None and now - last < COMPLAINT_INTERVAL:
                return
            self._complained[(error.status, error.reason)] = now
        log.warning(
            "a write was refused (retried with back-off; said once a minute)",
            extra={"resource": resource.plural, "namespace": self.namespace, "error": str(error)},
        )

    # --- cleaning up ------------------------------------------------------------------------------------

    def delete_created(self, batch: str | None) -> tuple[int, int]:
        """Delete the pods of this simulator's fleets and the Runs of ``batch``; (pods, Runs) deleted.
        Call after ``stop``: it makes its own requests, unthrottled, one at a time."""
        pods = self._delete_all(PODS, f"{decide.MANAGED_BY}={self.settings.manager}", self._is_fleet_pod)
        runs = self._delete_all(RUNS, f"{BATCH_LABEL}={batch}", lambda obj: True) if batch else 0
        return pods, runs

    def _is_fleet_pod(self, pod: Obj) -> bool:
        return self._fleet_key(pod) is not None

    def _delete_all(self, resource: ResourceType, selector: str, keep: Callable[[Obj], bool]) -> int:
        listed = self.kube.list(resource.path(self.namespace), {"labelSelector": selector})
        if isinstance(listed, Failure):
            log.warning("cannot list to clean up", extra={"resource": resource.plural, "error": str(listed.failure())})
            return 0
        deleted = 0
        for raw in listed.unwrap()[0]:
            obj: Obj = raw
            if not keep(obj):
                continue
            meta = obj["metadata"]
            options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
            result = self.kube.request("DELETE", resource.path(self.namespace, str(meta["name"])), body=json.dumps(options).encode(), content_type=JSON_CONTENT)
            if isinstance(result, Success) or result.failure().kind == "not_found":
                deleted += 1
            else:
                log.warning("cannot delete", extra={"resource": resource.plural, "object": meta["name"], "error": str(result.failure())})
        return deleted


def _signature(pod: Mapping[str, Any]) -> tuple[object, ...]:
    """What a fleet's plan depends on; a heartbeat changes none of it."""
    meta = pod.get("metadata") or {}
    return (decide.controller_of(pod), (pod.get("status") or {}).get("phase"), meta.get("deletionTimestamp"), json.dumps(meta.get("annotations"), sort_keys=True))


def fleets(namespace: str, runtimes: Iterable[str], replicas: int, capacity: Mapping[str, str], image: str | None = None) -> tuple[Fleet, ...]:
    """Command-line fleets: ``replicas`` pods of each runtime with the same capacity."""
    template: dict[str, Any] = {"spec": {"containers": [{"name": "runtime", "image": image}]}} if image else {}
    cap = tuple(sorted(capacity.items()))
    return tuple(Fleet(namespace, runtime, replicas, cap, None, template) for runtime in runtimes)
