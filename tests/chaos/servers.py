"""The two servers a chaos epoch runs on: the in-process dev cluster, and a real kube-apiserver.

Both give the harness one shape (:class:`ChaosServer`): writes as a named writer (User-Agent),
reads, the fault rules (``faults``: the dev cluster's own engine, or a :class:`FaultProxy`'s in
front of the real server), the Runtime Pods' heartbeats to pause, the scheduler's kubeconfig and
the epoch's write history in commit order for :func:`kruntimes.verify.check_history`.

:class:`DevServer` writes in process into the dev cluster's store; its simulator plays the Runtime
controller and runtimed, and ``cluster.history()`` is the history.

:class:`RealServer` is a real control plane of the test session's (``chaos_plane``), with deploy/
applied (deploy/overlays/sharded for a sharded epoch) and what an earlier epoch left deleted. The
schedulers run on the deploy/ ServiceAccount's token, through a fault proxy whose ``faults`` the
monkey sets exactly as on the dev cluster. Every other client (the setup, the creator, the monkey,
one :class:`~kruntimes.runtimesim.client.SimulatorClient` per namespace) goes through a second proxy
that injects nothing, so a fault hits the schedulers alone, as on the dev cluster, whose rules
never see its in-process writers. Both proxies record every write the server accepted, and
``tests/chaos/recorded.py`` makes the history of them, audited by watches opened before the first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Protocol

from returns.result import Failure

from kruntimes.devcluster import ApiError, DevCluster, SimulatorSettings
from kruntimes.devcluster.faults import Faults
from kruntimes.devcluster.store import WriteContext
from kruntimes.devcluster.types import GroupResource, Obj
from kruntimes.kubeclient.kube import JSON_CONTENT, MERGE_PATCH, Kube, load_configuration
from kruntimes.runtimesim import decide
from kruntimes.runtimesim.client import ClientSettings, SimulatorClient
from kruntimes.verify.history import Resource, Write
from tests.controlplane.faultproxy import FaultProxy, RecordedWrite
from tests.controlplane.server import ControlPlane
from tests.realserver.support import REPO, SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT, apply_rendered, kubectl

from .recorded import WatchAudit, Watched, commit_history

RUNS: Final = GroupResource("kruntimes.io", "runs")
RUNTIMES: Final = GroupResource("kruntimes.io", "runtimes")
WORKSPACES: Final = GroupResource("kruntimes.io", "persistentworkspaces")
PODS: Final = GroupResource("", "pods")
EVENTS: Final = GroupResource("", "events")
LEASES: Final = GroupResource("coordination.k8s.io", "leases")
SETUP: Final = "kruntimes-devcluster/setup"
"""The writer of the Runtimes an epoch starts with (the dev cluster's own name for its setup)."""
SIMULATOR: Final = "kruntimes-chaos/runtime-sim"
_VERSIONS: Final = {"": "v1", "kruntimes.io": "v1alpha1", "coordination.k8s.io": "v1"}


class ChaosServer(Protocol):
    """What a chaos epoch needs of its server."""

    @property
    def name(self) -> str: ...
    @property
    def faults(self) -> Faults: ...
    @property
    def lease_namespace(self) -> str:
        """Where the schedulers' Leases live (``--leader-elect-resource-namespace``)."""
        ...

    def scheduler_kubeconfig(self, directory: Path) -> Path: ...
    def objects(self, resource: GroupResource, namespace: str | None = None, *, fresh: bool = False) -> list[Obj]:
        """The objects now (``fresh``) or as the writers' caches last saw them (a moment old at most)."""
        ...
    def ensure_namespace(self, namespace: str) -> None: ...
    def add_runtime(self, name: str, namespace: str, replicas: int, capacity: Mapping[str, str]) -> None: ...
    def create(self, resource: GroupResource, namespace: str, body: Obj, agent: str) -> Obj | None:
        """The object created, or ``None`` when the server refused it (so for every write)."""
        ...
    def update(self, resource: GroupResource, namespace: str, name: str, body: Obj, agent: str, subresource: str = "") -> Obj | None: ...
    def merge_patch(self, resource: GroupResource, namespace: str, name: str, patch: Obj, agent: str) -> Obj | None: ...
    def delete(self, resource: GroupResource, namespace: str, name: str, agent: str) -> Obj | None: ...
    def pause_heartbeat(self, namespace: str, pod: str) -> None: ...
    def resume_heartbeat(self, namespace: str, pod: str) -> None: ...
    def scheduler_watches(self) -> int:
        """Watches the schedulers hold open now."""
        ...
    def history(self) -> list[Write]:
        """Every committed version since the epoch began, in commit order."""
        ...
    def audit(self, history: list[Write]) -> list[str]:
        """Where the history and an independent record of the server's commits disagree (empty: nowhere)."""
        ...
    def refused(self) -> list[str]:
        """The schedulers' requests the server refused with 401 or 403, as the server answered them."""
        ...


# --- the dev cluster ----------------------------------------------------------------------------


class DevServer:
    """The in-process dev cluster: writes go straight into its store, unjudged by its fault rules."""

    name: Final = "dev"
    lease_namespace: Final = "default"

    def __init__(self, cluster: DevCluster) -> None:
        self.cluster = cluster
        self._watch_baseline = cluster.store.subscription_count
        """Watches open before any scheduler started (the simulator's)."""

    @property
    def faults(self) -> Faults:
        return self.cluster.faults

    def scheduler_kubeconfig(self, directory: Path) -> Path:
        return self.cluster.kubeconfig_path(directory)

    def _rd(self, resource: GroupResource) -> Any:
        rd = self.cluster.registry.storage(resource)
        assert rd is not None, resource
        return rd

    def objects(self, resource: GroupResource, namespace: str | None = None, *, fresh: bool = False) -> list[Obj]:
        return self.cluster.store.list_objects(resource, namespace)[0]

    def ensure_namespace(self, namespace: str) -> None:
        self.cluster.service.ensure_namespace(namespace)

    def add_runtime(self, name: str, namespace: str, replicas: int, capacity: Mapping[str, str]) -> None:
        self.cluster.add_runtime(name, replicas=replicas, capacity=capacity, namespace=namespace)

    def create(self, resource: GroupResource, namespace: str, body: Obj, agent: str) -> Obj | None:
        try:
            created: Obj = self.cluster.service.create(self._rd(resource), namespace, body, WriteContext("create", user_agent=agent))
            return created
        except ApiError:
            return None

    def update(self, resource: GroupResource, namespace: str, name: str, body: Obj, agent: str, subresource: str = "") -> Obj | None:
        try:
            updated: Obj = self.cluster.service.update(self._rd(resource), namespace, name, body, WriteContext("update", subresource, agent))
            return updated
        except ApiError:
            return None

    def merge_patch(self, resource: GroupResource, namespace: str, name: str, patch: Obj, agent: str) -> Obj | None:
        try:
            patched: Obj = self.cluster.service.patch(self._rd(resource), namespace, name, "application/merge-patch+json", patch,
                                                      WriteContext("patch", user_agent=agent))
            return patched
        except ApiError:
            return None

    def delete(self, resource: GroupResource, namespace: str, name: str, agent: str) -> Obj | None:
        try:
            deleted: Obj = self.cluster.service.delete(self._rd(resource), namespace, name, WriteContext("delete", user_agent=agent))[0]
            return deleted
        except ApiError:
            return None

    def pause_heartbeat(self, namespace: str, pod: str) -> None:
        assert self.cluster.simulator is not None
        self.cluster.simulator.pause_heartbeat(namespace, pod)

    def resume_heartbeat(self, namespace: str, pod: str) -> None:
        assert self.cluster.simulator is not None
        self.cluster.simulator.resume_heartbeat(namespace, pod)

    def scheduler_watches(self) -> int:
        return self.cluster.store.subscription_count - self._watch_baseline

    def history(self) -> list[Write]:
        return list(self.cluster.history())

    def audit(self, history: list[Write]) -> list[str]:
        return []  # the store's own record of every commit

    def refused(self) -> list[str]:
        return []  # no RBAC


@contextmanager
def dev_server(seed: int, execute_runs: float, *, workdir: Path, sharded: bool) -> Iterator[ChaosServer]:
    with DevCluster.start(
        simulator=SimulatorSettings(heartbeat_interval=1.0, execute_runs=execute_runs),
        auto_create_namespaces=True, fault_seed=seed, bookmark_interval=5.0, event_window=50_000,
    ) as cluster:
        yield DevServer(cluster)


# --- the real server -----------------------------------------------------------------------------


def path_of(resource: GroupResource, namespace: str | None, name: str = "", subresource: str = "") -> str:
    base = f"/apis/{resource.group}/{_VERSIONS[resource.group]}" if resource.group else "/api/v1"
    where = f"/namespaces/{namespace}" if namespace else ""
    return base + where + f"/{resource.plural}" + (f"/{name}" if name else "") + (f"/{subresource}" if subresource else "")


WATCHED: Final = (RUNS, RUNTIMES, WORKSPACES, PODS, EVENTS)
"""Everything an epoch writes, watched in every namespace (and the Leases, in theirs) for the audit."""


class ChaosPlane:
    """A control plane of the chaos tests' own, with deploy/ applied; the RBAC of the last epoch's mode."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        kubectl(plane, "apply", "--server-side", "--force-conflicts", "-k", str(REPO / "deploy"))
        kubectl(plane, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        self.sharded = False

    def rbac(self, *, sharded: bool) -> None:
        """deploy/ RBAC for one elected leader, or deploy/overlays/sharded's (nothing more)."""
        if sharded == self.sharded:
            return
        if sharded:
            apply_rendered(self.plane, REPO / "deploy" / "overlays" / "sharded")
        else:
            apply_rendered(self.plane, REPO / "deploy")
            for kind in ("clusterrolebinding", "clusterrole"):
                kubectl(self.plane, "delete", "--ignore-not-found", kind, "kruntimes:scheduler-shard-namespaces")
        self.sharded = sharded


def _admin(plane: ControlPlane, agent: str = "kruntimes-chaos/admin") -> Kube:
    return Kube(load_configuration(str(plane.admin_kubeconfig)).unwrap().configuration, request_timeout=30, user_agent=agent)


def _clear(admin: Kube) -> None:
    """Delete what an earlier epoch left: its objects in every namespace, its schedulers' Leases."""
    namespaces, _ = admin.list("/api/v1/namespaces").unwrap()
    for namespace in namespaces:
        meta = namespace["metadata"]
        assert isinstance(meta, dict)
        name = str(meta["name"])
        for resource in (RUNS, RUNTIMES, WORKSPACES, PODS, EVENTS):
            admin.request("DELETE", path_of(resource, name)).unwrap()
    admin.request("DELETE", path_of(LEASES, SCHEDULER_NAMESPACE)).unwrap()


class RealServer:
    """A real kube-apiserver behind two recording proxies (see the module docstring)."""

    name: Final = "real"
    lease_namespace: Final = SCHEDULER_NAMESPACE

    def __init__(self, chaos_plane: ChaosPlane, seed: int, execute_runs: float, *, workdir: Path, sharded: bool) -> None:
        self.plane = chaos_plane.plane
        self.workdir = workdir
        self.execute_runs = execute_runs
        self.admin = _admin(self.plane)
        _clear(self.admin)
        chaos_plane.rbac(sharded=sharded)
        _, version = self.admin.list(path_of(PODS, None)).unwrap()
        watched = [Watched(Resource(r.group, r.plural), path_of(r, None)) for r in WATCHED]
        watched.append(Watched(Resource(LEASES.group, LEASES.plural), path_of(LEASES, SCHEDULER_NAMESPACE), SCHEDULER_NAMESPACE))
        self._audit = WatchAudit(self.admin, watched, version)
        self.scheduler_proxy = FaultProxy.before(self.plane, seed=seed, record_writes=True).start()
        self.client_proxy = FaultProxy.before(self.plane, record_writes=True).start()
        self._clients: dict[str, Kube] = {}
        self.simulators: dict[str, SimulatorClient] = {}

    @property
    def faults(self) -> Faults:
        return self.scheduler_proxy.faults

    def scheduler_kubeconfig(self, directory: Path) -> Path:
        return self.plane.service_account_kubeconfig(directory / "scheduler.kubeconfig", SCHEDULER_NAMESPACE, SCHEDULER_SERVICE_ACCOUNT,
                                                     server=self.scheduler_proxy.server)

    def client(self, agent: str) -> Kube:
        """The admin's token through the proxy that injects nothing, as ``agent``."""
        kube = self._clients.get(agent)
        if kube is None:
            path = self.client_proxy.kubeconfig(self.workdir / f"client-{len(self._clients)}.kubeconfig", self.plane.admin_token)
            kube = self._clients[agent] = Kube(load_configuration(str(path)).unwrap().configuration, request_timeout=30, user_agent=agent)
        return kube

    def objects(self, resource: GroupResource, namespace: str | None = None, *, fresh: bool = False) -> list[Obj]:
        if not fresh and resource in (RUNS, PODS, RUNTIMES) and self.simulators:
            chosen = [self.simulators[namespace]] if namespace is not None else list(self.simulators.values())
            found: list[Obj] = []
            for simulator in chosen:
                cache = simulator.runs if resource == RUNS else simulator.pods if resource == PODS else simulator.runtimes
                assert cache is not None
                found.extend(cache.values())
            return found
        items, _ = self.admin.list(path_of(resource, namespace)).unwrap()
        return [dict(item) for item in items]

    def ensure_namespace(self, namespace: str) -> None:
        """The namespace (made by the admin, past the proxies: namespaces are not judged) and its simulator."""
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        made = self.admin.create("/api/v1/namespaces", body)
        if isinstance(made, Failure) and made.failure().kind != "already_exists":
            made.unwrap()
        if namespace not in self.simulators:
            kube = self._simulator_client(namespace)
            settings = ClientSettings(namespace=namespace, follow_runtimes=True, heartbeat_interval=1.0,
                                      runs=decide.RunSettings(duration=self.execute_runs), qps=0, workers=2)
            simulator = self.simulators[namespace] = SimulatorClient(kube, settings)
            simulator.start()
            assert simulator.wait_synced(60), f"the runtime simulator of {namespace} did not sync"

    def _simulator_client(self, namespace: str) -> Kube:
        """A client of its own per simulator (each observes its client's requests)."""
        path = self.client_proxy.kubeconfig(self.workdir / f"simulator-{namespace}.kubeconfig", self.plane.admin_token)
        kube = Kube(load_configuration(str(path)).unwrap().configuration, request_timeout=30, user_agent=SIMULATOR)
        self._clients[f"{SIMULATOR}@{namespace}"] = kube
        return kube

    def add_runtime(self, name: str, namespace: str, replicas: int, capacity: Mapping[str, str]) -> None:
        body: Obj = {
            "apiVersion": "kruntimes.io/v1alpha1", "kind": "Runtime", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "capacity": {"resources": dict(capacity)},
                     "template": {"spec": {"containers": [{"name": "runtime", "image": "kruntimes/runtime:chaos"}]}}},
        }
        assert self.create(RUNTIMES, namespace, body, SETUP) is not None, f"Runtime {namespace}/{name} refused"

    def _send(self, agent: str, method: str, path: str, body: Obj | None, content_type: str = JSON_CONTENT) -> Obj | None:
        data = None if body is None else json.dumps(body).encode()
        answer = self.client(agent).request(method, path, body=data, content_type=content_type if data is not None else None)
        return None if isinstance(answer, Failure) else dict(answer.unwrap())

    def create(self, resource: GroupResource, namespace: str, body: Obj, agent: str) -> Obj | None:
        return self._send(agent, "POST", path_of(resource, namespace), {**body, "metadata": {**body.get("metadata", {}), "namespace": namespace}})

    def update(self, resource: GroupResource, namespace: str, name: str, body: Obj, agent: str, subresource: str = "") -> Obj | None:
        return self._send(agent, "PUT", path_of(resource, namespace, name, subresource), body)

    def merge_patch(self, resource: GroupResource, namespace: str, name: str, patch: Obj, agent: str) -> Obj | None:
        return self._send(agent, "PATCH", path_of(resource, namespace, name), patch, MERGE_PATCH)

    def delete(self, resource: GroupResource, namespace: str, name: str, agent: str) -> Obj | None:
        return self._send(agent, "DELETE", path_of(resource, namespace, name), None)

    def pause_heartbeat(self, namespace: str, pod: str) -> None:
        self.simulators[namespace].pause_heartbeat(pod)

    def resume_heartbeat(self, namespace: str, pod: str) -> None:
        self.simulators[namespace].resume_heartbeat(pod)

    def scheduler_watches(self) -> int:
        return self.scheduler_proxy.open_watches()

    def recorded(self) -> list[RecordedWrite]:
        return self.scheduler_proxy.writes() + self.client_proxy.writes()

    def history(self) -> list[Write]:
        """Read once every writer but the simulators has stopped: the simulators stop here, so the
        history is the last word, and the audit can compare it with the server's objects."""
        self._stop_simulators()
        return [*self._audit.complete(commit_history(self.recorded()))]

    def _stop_simulators(self) -> None:
        for simulator in self.simulators.values():
            simulator.stop()

    def audit(self, history: list[Write]) -> list[str]:
        return self._audit.differences(history)

    def refused(self) -> list[str]:
        """From the proxy's record of the last exchanges (``faultproxy.HISTORY``): the schedulers'
        logs are read for the rest."""
        return [f"{e.method} {e.path}: {e.forwarded_status}" for e in self.scheduler_proxy.history() if e.forwarded_status in (401, 403)]

    def close(self) -> None:
        self._stop_simulators()
        self._audit.stop()
        for proxy in (self.scheduler_proxy, self.client_proxy):
            proxy.stop()
        for kube in self._clients.values():
            kube.close()
        self.admin.close()
        failures = self.scheduler_proxy.failures + self.client_proxy.failures
        assert not failures, f"a fault proxy itself failed: {failures}"


@contextmanager
def real_server(chaos_plane: ChaosPlane, seed: int, execute_runs: float, *, workdir: Path, sharded: bool) -> Iterator[ChaosServer]:
    server = RealServer(chaos_plane, seed, execute_runs, workdir=workdir, sharded=sharded)
    try:
        yield server
    finally:
        server.close()
