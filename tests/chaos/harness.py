"""The chaos harness: a server with fault injection, real scheduler processes, then the checker.

One *epoch* is: a server (``tests/chaos/servers.py``: a fresh in-process dev cluster, or a real
kube-apiserver behind fault proxies) whose Runtime simulator executes Runs so capacity churns,
``replicas`` ``kruntimes scheduler`` subprocesses with leader election on short leases, a creator thread adding a mix of Runs (plain,
multi-slot, preferred and required (anti-)affinity, unfittable, invalid,
workspace-bound, in two namespaces), a chaos monkey injecting every fault type
(see :data:`FAULTS`; :data:`LOSE_RESPONSE` when a spec opts in), and a process
killer (SIGKILL of the leader, SIGKILL of a random replica and restart, SIGTERM,
SIGSTOP of the leader past its Lease then SIGCONT). With ``ChaosSpec.shard_group`` the replicas run
in sharded mode (``--shard-by-namespace``: each schedules the namespaces it holds), and the killer
also SIGSTOPs a random replica past its lease. Then the faults stop, the cluster settles,
the schedulers shut down, and :func:`kruntimes.verify.check_history` judges the
whole write history. :func:`run_epoch` returns an :class:`EpochResult` with the
counts. ``tests/chaos/test_chaos.py`` runs a quick epoch; ``benchmarks/chaos_large.py``
chains many.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Final, Protocol

from kruntimes.devcluster.types import GroupResource, Obj
from kruntimes.effects.binder import DEFAULT_AMBIGUOUS_HOLD
from kruntimes.pure.model.objects import SchedulerConfig
from kruntimes.verify import SHARD_GROUP_LABEL, SHARD_NAMESPACE_LABEL, SHARD_ROLE_LABEL, CheckOptions, Report, Violation, check_history
from kruntimes.verify.checker import pending_violations

from .servers import LEASES, PODS, RUNS, RUNTIMES, WORKSPACES, ChaosServer, dev_server

REPO: Final = Path(__file__).resolve().parents[2]
KRUNTIMES: Final = REPO / ".venv" / "bin" / "kruntimes"
MONKEY: Final = "kruntimes-chaos/monkey"
CREATOR: Final = "kruntimes-chaos/creator"
LEASE_NAME: Final = "kruntimes-scheduler"
STARTUP_GRACE: Final = 3.0
"""Seconds a scheduler process is given to install its signal handlers before a SIGTERM is judged."""
STALE_AFTER: Final = 3.0
"""The schedulers' --heartbeat-stale-after: a paused heartbeat matters within seconds."""

FAULTS: Final = (
    "conflict_409",
    "concurrent_writer",
    "drop_watches",
    "gone_410",
    "error_500",
    "error_503",
    "throttle_429",
    "latency",
    "heartbeat_stop",
    "pod_unready",
    "capacity_change",
    "pod_delete",
    "cancel",
    "reset_retry",
)
"""Every fault type the monkey injects (process kills are counted separately)."""

MAX_FAULT_RETRIES = 10
"""A fault that found nothing to act on (no Run Scheduled right now) is tried again this often per round:
on a loaded machine Runs pass through Scheduled and Running quickly, and an epoch must not skip a type."""
RESET_WINDOW: Final = 3.0
"""Seconds ``reset_retry`` keeps looking for a Run that is Scheduled or Running. Runs are bound in
waves and execute for 0.3 s, so at most instants none is: ten tries in a row, a few milliseconds
in all, found none for a whole epoch under load (the fault type was then never injected)."""
EXTRA_PHASE: Final = 30.0
"""Seconds the epoch keeps injecting the fault types still missing, from the first bind of a Run it
created for them (at most :data:`EXTRA_PHASE_LIMIT` in all)."""
EXTRA_PHASE_LIMIT: Final = 90.0
LOSE_RESPONSE: Final = "lose_response"
"""A ``runs/status`` PATCH the server applies and then answers by closing the connection (a lost
response): the scheduler cannot tell it from a write that never happened. Not in :data:`FAULTS`:
an epoch opts in with ``ChaosSpec(faults=FAULTS + (LOSE_RESPONSE,))``."""


@dataclass(frozen=True, slots=True)
class ChaosSpec:
    runs: int = 300
    namespaces: tuple[str, ...] = ("default", "chaos-b")
    runtimes: tuple[str, ...] = ("python", "node")
    pods_per_runtime: int = 3
    capacity: int = 2
    replicas: int = 2
    workers: int = 4
    create_rate: float = 40.0
    """Runs created per second (the creator sleeps between batches)."""
    fault_interval: float = 0.25
    """Seconds between two monkey actions."""
    leader_kills: int = 2
    sigkill_restarts: int = 2
    sigterm_restarts: int = 1
    leader_pauses: int = 0
    """SIGSTOPs of the Lease holder for ``pause_seconds`` (past its lease), then SIGCONT."""
    pause_seconds: tuple[float, float] = (3.0, 4.0)
    shard_group: str = ""
    """Non-empty: the replicas run in sharded mode (``--shard-by-namespace --shard-group NAME``) and
    share every namespace through Leases; no election Lease exists, ``shard_owner`` judges the writes."""
    replica_pauses: int = 0
    """SIGSTOPs of a random replica for ``pause_seconds`` (past its lease), then SIGCONT (sharded mode:
    once every namespace has an owner)."""
    lease: tuple[float, float, float] = (2.0, 1.5, 0.3)
    """The fleet's lease duration, renew deadline and retry period (seconds). A leader's write that
    passed its gate just before a pause still commits after the server's injected latency (up to
    1 s, more when rules stack): only a margin (duration - deadline) above that keeps it ahead of a
    takeover, so pause epochs use a wider one than the default 0.5 s."""
    execute_runs: float = 0.3
    settle_timeout: float = DEFAULT_AMBIGUOUS_HOLD + 30.0
    """Seconds the settling waits at most: a bind whose outcome was ambiguous (an injected 5xx, a lost
    answer) just before the faults ended holds its Run for the scheduler's ambiguous hold (60 s, the
    API server's request timeout) before a read frees it to be bound again."""
    race_window: float = 3.0
    seed: int = 1
    faults: tuple[str, ...] = FAULTS


@dataclass(slots=True)
class EpochResult:
    report: Report
    faults: Counter[str] = field(default_factory=Counter)
    kills: Counter[str] = field(default_factory=Counter)
    runs_created: int = 0
    phases: Counter[str] = field(default_factory=Counter)
    settled: bool = False
    seconds: float = 0.0
    stragglers: list[str] = field(default_factory=list)
    scheduler_exit_codes: list[int | None] = field(default_factory=list)
    graceful_exit_codes: list[int | None] = field(default_factory=list)
    diagnosis: str = ""
    """When an invariant was violated: the violations in full and the history around them; when the
    cluster did not settle: the Runs that kept it from settling, with their writes."""
    takeovers_during_pauses: int = 0
    """Pauses during which another replica took the Lease (the paused leader was deposed), or, in
    sharded mode, one of the namespaces the paused replica held."""
    in_flight: list[str] = field(default_factory=list)
    """``leader_only`` or ``shard_owner`` violations by a paused process of a write it had composed
    (and so passed its gate) before it was stopped: the limit of any client-side gate (docs/reliability.md)."""
    binds_by_writer: Counter[str] = field(default_factory=Counter)
    """Scheduler binds by identity (who did the work)."""
    server: str = "dev"
    refused: list[str] = field(default_factory=list)
    """Scheduler log lines reporting a request the server refused with 401 or 403 (deploy/ RBAC on
    the real server; none is ever right)."""
    audit: list[str] = field(default_factory=list)
    """Where the history disagrees with the server's own record of its commits (the real server's
    watches): a history the checker cannot be trusted with."""
    misses: Counter[str] = field(default_factory=Counter)
    """Monkey actions that found nothing to act on, by fault type and why (no candidate, a conflict)."""
    extra_phase: dict[str, float] = field(default_factory=dict)
    """The phase that keeps injecting only the missing fault types: its seconds, the Runs created in
    it, and how many of those a scheduler bound (a fault that acts on bound Runs needs some)."""

    def summary(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "runs_created": self.runs_created,
            "phases": dict(self.phases),
            "faults": dict(self.faults),
            "kills": dict(self.kills),
            "takeovers_during_pauses": self.takeovers_during_pauses,
            "in_flight_at_pause": self.in_flight[:10],
            "binds_by_writer": dict(self.binds_by_writer),
            "settled": self.settled,
            "seconds": round(self.seconds, 1),
            "stragglers": self.stragglers[:10],
            "scheduler_exit_codes": self.scheduler_exit_codes,
            "graceful_exit_codes": self.graceful_exit_codes,
            "refused": self.refused[:5],
            "audit": self.audit[:10],
            "misses": dict(self.misses),
            "extra_phase": self.extra_phase,
            "check": self.report.summary(),
        }


# --- scheduler processes -----------------------------------------------------------------


class Fleet:
    """``replicas`` scheduler subprocesses; each (re)start gets a fresh identity ``r<replica>g<generation>``."""

    def __init__(self, kubeconfig: Path, logs: Path, replicas: int, workers: int,
                 lease: tuple[float, float, float] = (2.0, 1.5, 0.3), shard_group: str = "", lease_namespace: str = "default") -> None:
        self.kubeconfig = kubeconfig
        self.lease = lease
        self.shard_group = shard_group
        self.lease_namespace = lease_namespace
        self.pauses: list[tuple[str, float, float]] = []
        """(identity, wall time of the SIGSTOP, wall time of the SIGCONT) of every pause."""
        self.logs = logs
        self.workers = workers
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * replicas
        self.identities: list[str] = [""] * replicas
        self.started: list[float] = [0.0] * replicas
        self.generation = 0
        self.exit_codes: list[int | None] = []
        self.graceful_exit_codes: list[int | None] = []
        """Exit codes of the SIGTERMed processes (graceful shutdown must exit 0)."""
        self._files: list[Any] = []

    def start(self, replica: int) -> str:
        self.generation += 1
        identity = f"r{replica}g{self.generation}"
        log = open(self.logs / f"scheduler-{identity}.log", "wb")  # noqa: SIM115 (closed in stop_all)
        self._files.append(log)
        argv = [
            str(KRUNTIMES), "scheduler", "--kubeconfig", str(self.kubeconfig), "--workers", str(self.workers),
            "--leader-elect", "--leader-elect-resource-namespace", self.lease_namespace,
            "--leader-elect-lease-duration", f"{round(self.lease[0] * 1000)}ms",
            "--leader-elect-renew-deadline", f"{round(self.lease[1] * 1000)}ms",
            "--leader-elect-retry-period", f"{round(self.lease[2] * 1000)}ms", "--leader-elect-identity", identity,
            "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
            "--heartbeat-stale-after", f"{int(STALE_AFTER)}s", "--log-format", "json", "--log-level", "warning",
        ]
        if self.shard_group:
            argv += ["--shard-by-namespace", "--shard-group", self.shard_group]
        self.procs[replica] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.started[replica] = time.monotonic()
        self.identities[replica] = identity
        return identity

    def start_all(self) -> None:
        for replica in range(len(self.procs)):
            self.start(replica)

    def replica_of(self, identity: str) -> int | None:
        for replica, known in enumerate(self.identities):
            if known == identity and self.procs[replica] is not None:
                return replica
        return None

    def pause(self, replica: int, seconds: float, stop: threading.Event, server: ChaosServer) -> bool:
        """SIGSTOP ``replica`` for ``seconds``, then SIGCONT; ``True`` when the Lease changed hands meanwhile
        (sharded mode: when another replica took one of the namespaces the paused one held)."""
        proc = self.procs[replica]
        if proc is None:
            return False
        identity = self.identities[replica]
        held = [ns for ns, holder in shard_holders(server, self.shard_group).items() if holder == identity] if self.shard_group else []
        proc.send_signal(signal.SIGSTOP)
        stopped = time.time()
        try:
            stop.wait(seconds)
            if self.shard_group:
                now = shard_holders(server, self.shard_group)
                return any(now.get(ns, "") not in ("", identity) for ns in held)
            return lease_holder(server) not in ("", identity)
        finally:
            proc.send_signal(signal.SIGCONT)  # always: a stopped process would not even receive SIGTERM
            self.pauses.append((identity, stopped, time.time()))

    def kill(self, replica: int, sig: signal.Signals = signal.SIGKILL, *, wait: float = 30.0) -> None:
        proc = self.procs[replica]
        if proc is None:
            return
        proc.send_signal(sig)
        try:
            code: int | None = proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait(5)
        self.exit_codes.append(code)
        if sig == signal.SIGTERM:
            self.graceful_exit_codes.append(code)
        self.procs[replica] = None

    def stop_all(self) -> None:
        """SIGTERM every replica once (a second signal means "exit now") and collect the exit codes."""
        live = [(replica, proc) for replica, proc in enumerate(self.procs) if proc is not None]
        # judge the graceful shutdown of a running scheduler, not of one still importing its modules
        youngest = max((self.started[replica] for replica, _ in live), default=0.0)
        time.sleep(max(0.0, youngest + STARTUP_GRACE - time.monotonic()))
        for _, proc in live:
            proc.send_signal(signal.SIGTERM)
        for replica, proc in live:
            try:
                code: int | None = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait(5)
            self.exit_codes.append(code)
            self.graceful_exit_codes.append(code)
            self.procs[replica] = None
        for log in self._files:
            log.close()

    def refused_requests(self) -> list[str]:
        """Log lines of every replica that report a request the server refused with 401 or 403."""
        return [line for path in sorted(self.logs.glob("scheduler-*.log")) for line in refused_lines(path.read_text(errors="replace"))]


def refused_lines(log: str) -> list[str]:
    """A scheduler log's lines that report a request the server refused with 401 or 403 (read as
    ``tests/realserver/support.py``'s ``SchedulerProcess.refused_requests`` reads them)."""
    return [line for line in log.splitlines() if "HTTP 403" in line or "HTTP 401" in line or "forbidden" in line.lower()]


def lease_holder(server: ChaosServer) -> str:
    obj = next((o for o in server.objects(LEASES, server.lease_namespace, fresh=True) if o["metadata"]["name"] == LEASE_NAME), None)
    if obj is None:
        return ""
    return str((obj.get("spec") or {}).get("holderIdentity") or "")


def shard_holders(server: ChaosServer, group: str) -> dict[str, str]:
    """Sharded mode: namespace -> holder of its assignment Lease ("" when released)."""
    holders: dict[str, str] = {}
    for obj in server.objects(LEASES, server.lease_namespace, fresh=True):
        labels = obj["metadata"].get("labels") or {}
        if labels.get(SHARD_GROUP_LABEL) == group and labels.get(SHARD_ROLE_LABEL) == "assignment":
            holders[str(labels.get(SHARD_NAMESPACE_LABEL, ""))] = str((obj.get("spec") or {}).get("holderIdentity") or "")
    return holders


# --- the world ------------------------------------------------------------------------------


class World:
    """Writes into the server (as the chaos monkey or the Run creator) and counts faults."""

    def __init__(self, server: ChaosServer, spec: ChaosSpec, rng: random.Random) -> None:
        self.server = server
        self.spec = spec
        self.rng = rng
        self.faults: Counter[str] = Counter()
        self.misses: Counter[str] = Counter()
        self.armed: dict[int, tuple[str, int]] = {}
        self.paused: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self.created = 0
        self.touches = 0
        self.stopping = threading.Event()
        self.missing_only = threading.Event()
        """Set: the monkey's rounds hold only the fault types that have not happened yet."""

    def objects(self, resource: GroupResource, namespace: str | None = None) -> list[Obj]:
        return self.server.objects(resource, namespace)

    # --- setup ---

    def setup(self) -> None:
        for namespace in self.spec.namespaces:
            self.server.ensure_namespace(namespace)
            for runtime in self.spec.runtimes:
                self.server.add_runtime(runtime, namespace, self.spec.pods_per_runtime, {"runs": str(self.spec.capacity)})
            # one workspace bound to a pod (placement), one Lost (the Run waits with the workspace message)
            for name, phase in (("ws-bound", "Bound"), ("ws-lost", "Lost")):
                body = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "PersistentWorkspace", "metadata": {"name": name},
                        "spec": {"runtime": self.spec.runtimes[0], "mode": "RuntimePodLocal"}}
                ws = self.server.create(WORKSPACES, namespace, body, CREATOR)
                assert ws is not None, f"workspace {namespace}/{name} refused"
                status = {"phase": phase, "boundPod": f"{self.spec.runtimes[0]}-0" if phase == "Bound" else ""}
                assert self.server.update(WORKSPACES, namespace, name, {**ws, "status": status}, CREATOR, "status") is not None

    # --- Runs ---

    def run_body(self, index: int) -> Obj:
        rng = self.rng
        runtime = rng.choice(self.spec.runtimes)
        spec: dict[str, Any] = {"runtime": runtime, "mode": {"task": {}}}
        labels = {"team": f"t{index % 5}", "app": rng.choice(("web", "batch", "ml"))}
        roll = rng.random()
        if roll < 0.10:
            spec["resources"] = {"requests": {"runs": "2"}}
        elif roll < 0.20:
            spec["affinity"] = {"runAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": rng.randint(1, 100), "runAffinityTerm": {"labelSelector": {"matchLabels": {"app": labels["app"]}}, "topologyKey": "kruntimes.io/runtime-pod"}}]}}
        elif roll < 0.25:
            spec["affinity"] = {"runAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"team": labels["team"], "app": labels["app"]}}, "topologyKey": "kruntimes.io/runtime-pod"}]}}
        elif roll < 0.28:
            labels["cohort"] = f"c{index % 7}"
            spec["affinity"] = {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"cohort": labels["cohort"]}}, "topologyKey": "kruntimes.io/runtime-pod"}]}}
        elif roll < 0.29:
            spec["resources"] = {"requests": {"gpu": "1"}}  # no pod advertises gpu: waits
        elif roll < 0.30:
            spec["resources"] = {"requests": {"runs": rng.choice(("500m", "-1", "abc", "1e99999", "99999999999999999999Ei"))}}
        elif roll < 0.31:
            spec["affinity"] = {"runAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}, "topologyKey": "zone"}]}}
        elif roll < 0.32:
            spec["runtime"] = self.spec.runtimes[0]
            spec["workspace"] = {"name": rng.choice(("ws-bound", "ws-lost", "ws-missing")), "kind": "PersistentWorkspace", "apiGroup": "kruntimes.io"}
        elif roll < 0.33:
            spec["cancelRequested"] = True
        return {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": f"run-{index}", "labels": labels}, "spec": spec}

    def create_one(self, index: int) -> None:
        """One more Run (``run-<index>``), plain, in the namespace the creator would use."""
        namespace = self.spec.namespaces[index % len(self.spec.namespaces)]
        body = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run", "metadata": {"name": f"run-{index}"}, "spec": {"runtime": self.spec.runtimes[0], "mode": {"task": {}}}}
        if self.server.create(RUNS, namespace, body, CREATOR) is not None:
            with self.lock:
                self.created += 1

    def create_runs(self, total: int, stop: threading.Event) -> None:
        batch = max(1, int(self.spec.create_rate / 10))
        index = 0
        while index < total and not stop.is_set():
            started = time.monotonic()
            for _ in range(min(batch, total - index)):
                namespace = self.spec.namespaces[index % len(self.spec.namespaces)]
                body = self.run_body(index)
                index += 1
                if self.server.create(RUNS, namespace, body, CREATOR) is not None:
                    with self.lock:
                        self.created += 1
            stop.wait(max(0.0, batch / self.spec.create_rate - (time.monotonic() - started)))

    # --- faults ---

    def arm(self, kind: str, rule_id: int, count: int) -> None:
        self.armed[rule_id] = (kind, count)

    def fired(self) -> Counter[str]:
        """Injected faults by type: monkey writes as counted, API faults as actually fired."""
        counts = Counter(self.faults)
        live = {rule.id: rule for rule in self.server.faults.rules()}
        for rule_id, (kind, count) in self.armed.items():
            rule = live.get(rule_id)
            counts[kind] += rule.fired if rule is not None else count
        return counts

    def monkey(self, stop: threading.Event) -> None:
        self.stopping = stop
        actions: dict[str, Callable[[], None]] = {
            "conflict_409": lambda: self.arm("conflict_409", self.server.faults.conflict("runs", subresource="status", count=(n := self.rng.randint(1, 3))), n),
            "concurrent_writer": self.touch_pending,
            "drop_watches": self.drop_watches,
            "gone_410": self.gone,
            "error_500": lambda: self.api_error(500),
            "error_503": lambda: self.api_error(503),
            "throttle_429": lambda: self.api_error(429),
            "latency": self.latency,
            LOSE_RESPONSE: self.lose_response,
            "heartbeat_stop": self.stop_heartbeat,
            "pod_unready": self.unready,
            "capacity_change": self.change_capacity,
            "pod_delete": self.delete_pod,
            "cancel": self.cancel,
            "reset_retry": self.reset_retry,
        }
        order: list[str] = []
        retries: dict[str, int] = {}
        while not stop.wait(self.spec.fault_interval):
            self.resume_due()
            if not order:  # every type once per round, in a fresh random order
                fired = self.fired() if self.missing_only.is_set() else None
                order = [kind for kind in self.spec.faults if fired is None or fired[kind] == 0]
                self.rng.shuffle(order)
                retries = {}
                if not order:
                    continue
            name = order.pop()
            before = sum(self.faults.values())
            actions[name]()
            if sum(self.faults.values()) == before and retries.get(name, 0) < MAX_FAULT_RETRIES:
                # Some faults need a moment to exist (a Run that is Scheduled right now, a pod to
                # delete): one that found nothing to act on is tried again later in the same round
                # (at most 3 times), so a loaded machine does not make an epoch skip a fault type.
                retries[name] = retries.get(name, 0) + 1
                order.insert(self.rng.randrange(len(order) + 1), name)

    def api_error(self, code: int) -> None:
        verbs = self.rng.choice((("patch",), ("list",), ("watch",), ("get", "list", "watch", "patch", "create", "update")))
        resource = self.rng.choice(("runs", "pods", "leases", None))
        count = self.rng.randint(1, 3)
        kind = {500: "error_500", 503: "error_503", 429: "throttle_429"}[code]
        rule = self.server.faults.error(code, resource, verbs=verbs, count=count, retry_after=1 if code == 429 else None)
        self.arm(kind, rule, count)

    def lose_response(self) -> None:
        count = self.rng.randint(1, 3)
        rule = self.server.faults.lose_response("runs", subresource="status", verbs=("patch",), count=count)
        self.arm(LOSE_RESPONSE, rule, count)

    def latency(self) -> None:
        count = self.rng.randint(2, 6)
        self.arm("latency", self.server.faults.latency(self.rng.uniform(0.2, 1.0), self.rng.choice(("runs", "pods", None)), count=count), count)

    def drop_watches(self) -> None:
        self.faults["drop_watches"] += self.server.faults.drop_watches(self.rng.choice(("runs", "pods", None)), abort=self.rng.random() < 0.5)

    def gone(self) -> None:
        count = self.rng.randint(1, 3)
        self.arm("gone_410", self.server.faults.expire_next_watch(self.rng.choice(("runs", "pods", None)), count=count), count)
        self.server.faults.drop_watches()

    def pick(self, resource: GroupResource, predicate: Callable[[Obj], bool], k: int = 1) -> list[Obj]:
        namespace = self.rng.choice(self.spec.namespaces)
        found = [o for o in self.objects(resource, namespace) if predicate(o)]
        if not found:  # nothing fits there right now: look in every namespace
            found = [o for o in self.objects(resource) if predicate(o)]
        return self.rng.sample(found, min(k, len(found)))

    def touch_pending(self) -> None:
        """A concurrent writer: bump Pending Runs' resourceVersion (a label) so an in-flight bind meets a real 409.
        Each touch writes a value of its own: a write that changes nothing commits nothing on a real server."""
        for run in self.pick(RUNS, lambda o: (o.get("status") or {}).get("phase", "") in ("", "Pending"), k=self.rng.randint(1, 5)):
            meta = run["metadata"]
            self.touches += 1
            patch = {"metadata": {"labels": {"touched": str(self.touches)}}}
            if self.server.merge_patch(RUNS, meta["namespace"], meta["name"], patch, MONKEY) is not None:
                self.faults["concurrent_writer"] += 1

    def stop_heartbeat(self) -> None:
        for pod in self.pick(PODS, lambda o: True):
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            if key not in self.paused:
                self.server.pause_heartbeat(*key)
                self.paused[key] = time.monotonic() + self.rng.uniform(STALE_AFTER + 1, STALE_AFTER + 5)
                self.faults["heartbeat_stop"] += 1

    def resume_due(self, *, everything: bool = False) -> None:
        now = time.monotonic()
        for key, due in list(self.paused.items()):
            if everything or now >= due:
                self.server.resume_heartbeat(*key)
                del self.paused[key]

    def unready(self) -> None:
        for pod in self.pick(PODS, lambda o: (o.get("status") or {}).get("phase") == "Running"):
            status = copy.deepcopy(pod.get("status") or {})
            status["phase"] = self.rng.choice(("Running", "Pending"))
            status["conditions"] = [
                {**c, "status": "False"} if c.get("type") == "Ready" else c for c in status.get("conditions") or []
            ]
            meta = pod["metadata"]
            if self.server.update(PODS, meta["namespace"], meta["name"], {**pod, "status": status}, MONKEY, "status") is not None:
                self.faults["pod_unready"] += 1

    def change_capacity(self) -> None:
        for runtime in self.pick(RUNTIMES, lambda o: True):
            body = copy.deepcopy(runtime)
            body["spec"]["capacity"] = {"resources": {"runs": str(self.rng.randint(1, self.spec.capacity + 2))}}
            meta = runtime["metadata"]
            if self.server.update(RUNTIMES, meta["namespace"], meta["name"], body, MONKEY) is not None:
                self.faults["capacity_change"] += 1

    def restore_capacity(self) -> None:
        for runtime in self.server.objects(RUNTIMES, fresh=True):
            body = copy.deepcopy(runtime)
            body["spec"]["capacity"] = {"resources": {"runs": str(self.spec.capacity)}}
            meta = runtime["metadata"]
            self.server.update(RUNTIMES, meta["namespace"], meta["name"], body, MONKEY)

    def capacity_restored(self) -> bool:
        """Whether every Runtime Pod carries its Runtime's restored capacity: the simulator copies a
        Runtime's capacity to its pods' annotations on its own thread, after the Runtime's write."""
        wanted = {"kruntimes.io/capacity.runs": str(self.spec.capacity)}
        for pod in self.server.objects(PODS, fresh=True):
            annotations = pod["metadata"].get("annotations") or {}
            if any(annotations.get(key) != value for key, value in wanted.items()):
                return False
        return True

    def delete_pod(self) -> None:
        for pod in self.pick(PODS, lambda o: True):
            meta = pod["metadata"]
            if self.server.delete(PODS, meta["namespace"], meta["name"], MONKEY) is not None:
                self.faults["pod_delete"] += 1

    def cancel(self) -> None:
        for run in self.pick(RUNS, lambda o: (o.get("status") or {}).get("phase", "") in ("", "Pending", "Scheduled", "Running")):
            meta = run["metadata"]
            patch = {"spec": {"cancelRequested": True}}
            if self.server.merge_patch(RUNS, meta["namespace"], meta["name"], patch, MONKEY) is not None:
                self.faults["cancel"] += 1

    def reset_retry(self) -> None:
        """What runtimed does when a Run's attempt fails and it retries: back to Pending, unassigned.
        Looks for a Run to reset for up to :data:`RESET_WINDOW` (a conflict just means "pick again")."""
        wanted = self.rng.randint(1, 3)
        deadline = time.monotonic() + RESET_WINDOW
        while not self._reset_some(wanted):
            if time.monotonic() >= deadline or self.stopping.wait(0.05):
                return

    def _reset_some(self, wanted: int) -> bool:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        done = False
        picked = self.pick(RUNS, lambda o: (o.get("status") or {}).get("phase") in ("Scheduled", "Running"), k=wanted)
        if not picked:
            self.misses["reset_retry: no Run Scheduled or Running"] += 1
        for run in picked:
            status = copy.deepcopy(run.get("status") or {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Running"]
            conditions.append({"type": "Running", "status": "False", "reason": "Retrying", "message": "attempt failed; retrying", "lastTransitionTime": stamp})
            status.update(phase="Pending", attempt=int(status.get("attempt") or 1) + 1, conditions=conditions)
            status.pop("assignedPod", None)
            status.pop("assignedPodUID", None)
            status.pop("message", None)
            meta = run["metadata"]
            if self.server.update(RUNS, meta["namespace"], meta["name"], {**run, "status": status}, MONKEY, "status") is not None:
                self.faults["reset_retry"] += 1
                done = True
            else:
                self.misses["reset_retry: refused (a conflict)"] += 1
        return done


def _bound(world: World, names: set[str]) -> int:
    """How many of the Runs ``names`` (any namespace) a scheduler has bound, as the world sees them now."""
    return sum(1 for run in world.objects(RUNS) if run["metadata"]["name"] in names and (run.get("status") or {}).get("assignedPod"))


# --- one epoch --------------------------------------------------------------------------------


def _standbys_watching(server: ChaosServer, fleet: Fleet, stop: threading.Event, timeout: float = 20.0) -> None:
    """Wait (a while at most) until every live replica has its three watches open: a standby that is
    still listing its caches does not campaign, and a pause then would outlive the lease unnoticed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = sum(1 for proc in fleet.procs if proc is not None)
        if server.scheduler_watches() >= 3 * live or stop.wait(0.2):
            return


def _shards_owned(server: ChaosServer, fleet: Fleet, spec: ChaosSpec, stop: threading.Event, timeout: float = 20.0) -> None:
    """Sharded mode: wait (a while at most) until a live replica holds every namespace of the spec, so
    that a pause stops a replica that has work, and the others are there to take it over."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holders = shard_holders(server, spec.shard_group)
        if all(fleet.replica_of(holders.get(ns, "")) is not None for ns in spec.namespaces) or stop.wait(0.2):
            return


def _killer(world: World, fleet: Fleet, spec: ChaosSpec, stop: threading.Event, duration: float, kills: Counter[str],
            takeovers: list[int]) -> None:
    plan = (["leader_sigkill"] * spec.leader_kills + ["sigkill_restart"] * spec.sigkill_restarts
            + ["sigterm_restart"] * spec.sigterm_restarts + ["leader_sigstop"] * spec.leader_pauses
            + ["replica_sigstop"] * spec.replica_pauses)
    world.rng.shuffle(plan)
    if not plan:
        return
    gap = duration / (len(plan) + 1)
    for action in plan:
        if stop.wait(world.rng.uniform(0.5 * gap, 1.5 * gap)):
            return
        if action == "replica_sigstop":
            _shards_owned(world.server, fleet, spec, stop)
            live = [replica for replica, proc in enumerate(fleet.procs) if proc is not None]
            # a replica that holds a namespace with Runs: a pause of one holding none has nothing to take over
            holders = shard_holders(world.server, spec.shard_group)
            working = [replica for replica in live if fleet.identities[replica] in {holders.get(ns) for ns in spec.namespaces}]
            if fleet.pause(world.rng.choice(working or live), world.rng.uniform(*spec.pause_seconds), stop, world.server):
                takeovers.append(1)
            kills[action] += 1
            continue
        if action == "leader_sigstop":
            _standbys_watching(world.server, fleet, stop)
            replica = fleet.replica_of(lease_holder(world.server))
            if replica is None:  # no leader yet (still starting on a loaded machine): pause the next one
                wait_until = time.monotonic() + 20.0
                while replica is None and time.monotonic() < wait_until and not stop.wait(0.1):
                    replica = fleet.replica_of(lease_holder(world.server))
            if replica is None:
                kills["leader_sigstop_skipped"] += 1
                continue
            if fleet.pause(replica, world.rng.uniform(*spec.pause_seconds), stop, world.server):
                takeovers.append(replica)
            kills[action] += 1
            continue
        if action == "leader_sigkill":
            holder = lease_holder(world.server)
            replica = fleet.replica_of(holder)
            if replica is None:
                replica = world.rng.randrange(len(fleet.procs))
            fleet.kill(replica, signal.SIGKILL)
        else:
            replica = world.rng.randrange(len(fleet.procs))
            if action == "sigterm_restart":
                stop.wait(max(0.0, fleet.started[replica] + STARTUP_GRACE - time.monotonic()))
            fleet.kill(replica, signal.SIGKILL if action == "sigkill_restart" else signal.SIGTERM)
        kills[action] += 1
        stop.wait(world.rng.uniform(0.0, 1.0))
        fleet.start(replica)


IN_FLIGHT_AFTER_SIGCONT: Final = 0.5
"""Seconds after its SIGCONT within which a stopped process's request that was already past its gate commits."""


def _composed_at(w: Any) -> float | None:
    """When the scheduler built this write, where the write itself says: an Event create's name ends
    in ``.<time_ns in hex>`` taken just before the gate; a bind's conditions carry the cycle's time."""
    if w.resource.plural == "events" and w.verb == "create":
        _, dot, suffix = w.name.rpartition(".")
        try:
            return int(suffix, 16) / 1e9 if dot else None
        except ValueError:
            return None
    if w.resource.plural == "runs" and (w.object.get("status") or {}).get("phase") == "Scheduled":
        stamps = [c.get("lastTransitionTime") for c in (w.object.get("status") or {}).get("conditions") or []]
        times = [datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in stamps if isinstance(t, str) and t]
        return max(times) if times else None
    return None


def in_flight_at_pause(history: list[Any], report: Report, pauses: list[tuple[str, float, float]]) -> list[Violation]:
    """The ``leader_only`` and ``shard_owner`` violations that are writes composed before their process was stopped and
    committed right after it was continued: they passed the gate while the Lease was still ours,
    and no client-side gate can recall a request it has let through. Everything else stays a violation."""
    by_rv = {w.resource_version: w for w in history}
    found: list[Violation] = []
    for violation in report.violations:
        w = by_rv.get(violation.resource_version)
        if violation.invariant not in ("leader_only", "shard_owner") or w is None:
            continue
        identity = w.user_agent.partition("/")[2]
        composed = _composed_at(w)
        if composed is not None and any(
            who == identity and composed < stopped and continued <= w.time <= continued + IN_FLIGHT_AFTER_SIGCONT
            for who, stopped, continued in pauses
        ):
            found.append(violation)
    return found


def settled(server: ChaosServer, config: SchedulerConfig) -> list[str]:
    """What still keeps the cluster from being settled: Runs executing, or Pending Runs the checker would flag."""
    runs = server.objects(RUNS, fresh=True)
    busy = [f"{r['metadata']['namespace']}/{r['metadata']['name']}: {r['status']['phase']}" for r in runs if (r.get("status") or {}).get("phase") in ("Scheduled", "Running", "Ready")]
    if busy:
        return busy
    return [str(v) for v in _flagged_pending(server, config, runs)]


def _flagged_pending(server: ChaosServer, config: SchedulerConfig, runs: list[Obj]) -> list[Violation]:
    """The checker's ``final_state`` violations of the Pending Runs among ``runs``, against the pods and workspaces now."""
    pods = server.objects(PODS, fresh=True)
    workspaces = server.objects(WORKSPACES, fresh=True)
    return pending_violations(runs, pods, workspaces, datetime.now(timezone.utc), config)


def diagnose(history: list[Any], report: Report, *, seconds: float = 6.0, limit: int = 3) -> str:
    """The violations in full and, for each of the first few, the writes around it.

    For a Run or pod violation: every write of that pod and of the Runs that were ever
    assigned to it, from ``seconds`` before the violating write up to it, with the writer
    (User-Agent), phase, assignment and the pod's capacity annotations; and the Lease
    holders over the same span. Enough to tell a stale cache from a ledger bug.
    """
    lines = [f"{len(report.violations)} violation(s):"]
    lines += [f"  {v}" for v in report.violations[:20]]
    by_rv = {w.resource_version: w for w in history}
    for violation in report.violations[:limit]:
        at = by_rv.get(violation.resource_version)
        if at is None or not violation.pod:
            continue
        namespace = at.namespace
        lines.append(f"around rv={violation.resource_version} (t={at.time:.3f}) on pod {namespace}/{violation.pod}:")
        for w in history:
            if w.time < at.time - seconds or w.resource_version > violation.resource_version:
                continue
            obj = w.object
            status = obj.get("status") or {}
            if w.resource.plural == "pods" and w.namespace == namespace and w.name == violation.pod:
                annotations = (obj.get("metadata") or {}).get("annotations") or {}
                capacity = {k: v for k, v in annotations.items() if k.startswith("kruntimes.io/capacity.")}
                ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
                what = f"pod {w.event_type} uid={(obj.get('metadata') or {}).get('uid')} phase={status.get('phase')} ready={ready} {capacity}"
            elif w.resource.plural == "runs" and w.namespace == namespace and (
                status.get("assignedPod") == violation.pod or f"{namespace}/{w.name}" == violation.run
            ):
                requests = ((obj.get("spec") or {}).get("resources") or {}).get("requests")
                what = f"run {w.name} {w.event_type} {w.verb}/{w.subresource} phase={status.get('phase')} pod={status.get('assignedPod')} requests={requests}"
            elif w.resource.plural == "leases":
                what = f"lease holder={(obj.get('spec') or {}).get('holderIdentity')}"
            else:
                continue
            lines.append(f"  t={w.time - at.time:+.3f}s rv={w.resource_version} by {w.user_agent}: {what}")
    return "\n".join(lines)


def diagnose_stragglers(history: list[Any], server: ChaosServer, config: SchedulerConfig, *, limit: int = 3) -> str:
    """Why the cluster did not settle: for the first few Pending Runs the checker flags, the Run
    as it stands (spec and status) and every committed write of it, with the writer, so a lost
    wakeup, a stale message and a write that never came can be told apart."""
    runs = server.objects(RUNS, fresh=True)
    flagged = _flagged_pending(server, config, runs)
    if not flagged:
        return ""
    start = history[0].time if history else 0.0
    by_label = {f"{r['metadata']['namespace']}/{r['metadata']['name']}": r for r in runs}
    lines = [f"{len(flagged)} Run(s) did not settle:"]
    for violation in flagged[:limit]:
        lines.append(f"  {violation}")
        obj = by_label.get(violation.run) or {}
        lines.append(f"    spec={json.dumps(obj.get('spec'), sort_keys=True)} labels={(obj.get('metadata') or {}).get('labels')}")
        namespace, _, name = violation.run.partition("/")
        for w in history:
            if w.resource.plural != "runs" or w.namespace != namespace or w.name != name:
                continue
            status = w.object.get("status") or {}
            lines.append(
                f"    t={w.time - start:7.3f}s rv={w.resource_version} {w.event_type} {w.verb}/{w.subresource} by {w.user_agent}: "
                f"phase={status.get('phase')} pod={status.get('assignedPod')} message={str(status.get('message'))[:120]!r}"
            )
    return "\n".join(lines)


class ServerFactory(Protocol):
    """Opens the server of one epoch (``tests/chaos/servers.py``: ``dev_server``, or ``real_server`` on a plane)."""

    def __call__(self, seed: int, execute_runs: float, *, workdir: Path, sharded: bool) -> AbstractContextManager[ChaosServer]: ...


@dataclass(frozen=True, slots=True)
class Target:
    """The server a chaos test runs on (the ``chaos_server`` fixture)."""

    name: str
    server: ServerFactory

    def size(self, dev: int, real: int) -> int:
        """An epoch's size on this server: a real server's epochs are shorter (it answers more slowly)."""
        return dev if self.name == "dev" else real


def run_epoch(spec: ChaosSpec, workdir: Path, *, server: ServerFactory = dev_server,
              log: Callable[[str], None] = lambda _m: None) -> EpochResult:
    """Run one chaos epoch in ``workdir`` (scheduler logs go there) on ``server`` and check its history."""
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rng = random.Random(spec.seed)
    config = SchedulerConfig(heartbeat_stale_after=timedelta(seconds=STALE_AFTER))
    kills: Counter[str] = Counter()
    with server(spec.seed, spec.execute_runs, workdir=workdir, sharded=bool(spec.shard_group)) as cluster:
        world = World(cluster, spec, rng)
        world.setup()
        log(f"set up in {time.monotonic() - started:.0f}s")
        fleet = Fleet(cluster.scheduler_kubeconfig(workdir), workdir, spec.replicas, spec.workers, spec.lease, spec.shard_group,
                      cluster.lease_namespace)
        fleet.start_all()
        stop = threading.Event()
        creator = threading.Thread(target=world.create_runs, args=(spec.runs, stop), name="creator", daemon=True)
        monkey = threading.Thread(target=world.monkey, args=(stop,), name="monkey", daemon=True)
        duration = spec.runs / spec.create_rate
        takeovers: list[int] = []
        killer = threading.Thread(target=_killer, args=(world, fleet, spec, stop, duration, kills, takeovers), name="killer", daemon=True)
        for thread in (creator, monkey, killer):
            thread.start()
        creator.join()
        log(f"created {world.created} runs at {time.monotonic() - started:.0f}s")
        killer.join()
        log(f"kills done at {time.monotonic() - started:.0f}s: {dict(kills)}")
        # keep injecting (30 s at most) until every fault type has actually happened at least once; a
        # trickle of new Runs keeps some Scheduled or Running for the faults that act on those (on a
        # loaded machine the burst may have finished before the monkey got to them). Only the types
        # still missing: the rules that fail lists wait for the schedulers' next list however late
        # their back-off makes it, so more of them would keep a replica from syncing its caches (and
        # from binding anything a missing fault could act on) for the whole phase.
        # A fault that acts on bound Runs (reset_retry) needs the schedulers to bind: the faults just
        # injected can hold a replica in its list back-off (0.8 s doubling to 30 s, as client-go's)
        # for tens of seconds on a loaded machine. So the 30 s count from the phase's first bind,
        # within EXTRA_PHASE_LIMIT.
        world.missing_only.set()
        extra_began = time.monotonic()
        extra = extra_began + EXTRA_PHASE
        index = spec.runs
        added: set[str] = set()
        first_bind: float | None = None
        while time.monotonic() < extra and any(world.fired()[kind] == 0 for kind in spec.faults):
            if world.fired()["reset_retry"] == 0 or world.fired()["cancel"] == 0:
                world.create_one(index)
                added.add(f"run-{index}")
                index += 1
            if first_bind is None and added and _bound(world, added):
                first_bind = time.monotonic()
                extra = min(first_bind + EXTRA_PHASE, extra_began + EXTRA_PHASE_LIMIT)
            elif first_bind is None and added and extra - time.monotonic() < 0.5:
                extra = min(extra + 0.5, extra_began + EXTRA_PHASE_LIMIT)  # nothing bound yet: wait on
            time.sleep(0.2)
        stop.set()
        monkey.join()
        extra_phase = {
            "seconds": round(time.monotonic() - extra_began, 1), "runs_created": float(len(added)),
            "first_bind_after": -1.0 if first_bind is None else round(first_bind - extra_began, 1),
            "runs_bound": float(_bound(world, added)),
        }
        log(f"created {world.created} runs in {time.monotonic() - started:.0f}s; settling; faults {dict(world.fired())}")
        # the faults end; the world heals; the schedulers must converge
        cluster.faults.clear()
        world.resume_due(everything=True)
        world.restore_capacity()
        # until the pods show it, a Run that fits only the restored capacity looks settled, then is
        # judged against pods that have room for it by the time the history is read
        healed_by = time.monotonic() + 10.0
        while not world.capacity_restored() and time.monotonic() < healed_by:
            time.sleep(0.1)
        for replica, proc in enumerate(fleet.procs):
            if proc is None:
                fleet.start(replica)
        deadline = time.monotonic() + spec.settle_timeout
        remaining = settled(cluster, config)
        reported = time.monotonic()
        while remaining and time.monotonic() < deadline:
            time.sleep(1.0)
            remaining = settled(cluster, config)
            if remaining and time.monotonic() - reported > 10:
                reported = time.monotonic()
                log(f"not settled: {remaining[:3]}")
        fired = world.fired()
        final_now = datetime.now(timezone.utc)
        log(f"settled={not remaining} at {time.monotonic() - started:.0f}s")
        fleet.stop_all()
        history = cluster.history()
        audit = cluster.audit(history)
        report = check_history(history, CheckOptions(race_window=spec.race_window, final_now=final_now, config=config))
        in_flight = in_flight_at_pause(history, report, fleet.pauses)
        if in_flight:  # judged by everything else; those few are the documented limit of the gate
            report = dataclasses.replace(report, violations=tuple(v for v in report.violations if v not in in_flight))
        phases = Counter(str((r.get("status") or {}).get("phase") or "Pending") for r in cluster.objects(RUNS, fresh=True))
        binds_by_writer = Counter(
            w.user_agent.partition("/")[2] for w in history
            if (w.resource.group, w.resource.plural) == RUNS and w.subresource == "status" and w.user_agent.startswith("kruntimes-scheduler/")
            and (w.object.get("status") or {}).get("phase") == "Scheduled"
        )
        return EpochResult(
            report=report, faults=fired, kills=kills, runs_created=world.created, phases=phases,
            settled=not remaining, seconds=time.monotonic() - started, stragglers=remaining,
            scheduler_exit_codes=fleet.exit_codes, graceful_exit_codes=fleet.graceful_exit_codes,
            diagnosis="\n".join(part for part in (
                "" if report.ok else diagnose(history, report),
                diagnose_stragglers(history, cluster, config) if remaining else "",
            ) if part),
            takeovers_during_pauses=len(takeovers),
            in_flight=[str(v) for v in in_flight], binds_by_writer=binds_by_writer,
            server=cluster.name, refused=fleet.refused_requests() + cluster.refused(), audit=audit,
            misses=Counter(world.misses), extra_phase=extra_phase,
        )


def main() -> int:
    """``python -m tests.chaos.harness [RUNS]``: one epoch, JSON summary on stdout."""
    import tempfile

    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    with tempfile.TemporaryDirectory() as tmp:
        result = run_epoch(ChaosSpec(runs=runs), Path(tmp), log=lambda m: print(m, file=sys.stderr, flush=True))
        print(json.dumps(result.summary(), indent=2))
        if os.environ.get("KEEP_LOGS"):
            for path in Path(tmp).glob("*.log"):
                print(path.name, path.read_text()[-2000:], file=sys.stderr)
    return 0 if result.report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
