"""The real kube-apiserver in the shape the integration tests use the dev cluster.

A test written against ``server`` (see conftest) runs twice: on the dev cluster, and on a real
control plane of its module's own, with deploy/ applied and the scheduler on its ServiceAccount's
token (so deploy/ RBAC judges every request it makes). The Runtime controller and runtimed are
played by ``kruntimes.runtimesim`` as an API client; the commit history the dev cluster records
is read from a watch of Runs opened before the test's first write (a watch delivers every
version, in commit order). The scheduler reaches the real server through a :class:`FaultProxy`, so
``faults`` takes the dev cluster's fault rules on both servers (the test's own client and the
simulator go straight to the server: a rule there applies to the scheduler alone).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.faults import WRITE_VERBS, Faults, RequestInfo
from kruntimes.kubeclient.kube import LEASES, RUNS, JSONObject, Kube, load_configuration, resource_version_of
from kruntimes.pure.readers.config import DEFAULT_LEASE_NAME
from kruntimes.runtimesim.client import ClientSettings, SimulatorClient
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.server import ControlPlane
from tests.polling import wait_until
from tests.realserver.support import Events

NAMESPACE: Final = "default"
SCHEDULER_ACCOUNT: Final = ("kruntimes-system", "kruntimes-scheduler")
_COLLECTIONS: Final = (
    "/apis/kruntimes.io/v1alpha1/namespaces/default/runs",
    "/apis/kruntimes.io/v1alpha1/namespaces/default/runtimes",
    "/apis/kruntimes.io/v1alpha1/namespaces/default/persistentworkspaces",
    "/api/v1/namespaces/default/pods",
    "/api/v1/namespaces/default/events",
    LEASES.path(SCHEDULER_ACCOUNT[0], DEFAULT_LEASE_NAME),  # where a leader-electing test left its Lease
)


@dataclass(frozen=True, slots=True)
class _Resource:
    plural: str


@dataclass(frozen=True, slots=True)
class RunVersion:
    """One committed version of a Run, as ``DevCluster.history`` gives it (the fields tests read)."""

    resource: _Resource
    event_type: str
    namespace: str
    name: str
    object: JSONObject


def admin_client(plane: ControlPlane) -> Kube:
    return Kube(load_configuration(str(plane.admin_kubeconfig)).unwrap().configuration, request_timeout=10,
                user_agent="kruntimes-tests")


def election_namespace(server: DevCluster | RealCluster) -> str:
    """Where a test's scheduler holds its Lease: deploy/ RBAC grants Leases in the scheduler's own
    namespace only, which the dev cluster (no RBAC, no such namespace) has no need of."""
    return SCHEDULER_ACCOUNT[0] if isinstance(server, RealCluster) else NAMESPACE


class RealCluster:
    """One test's view of a real control plane: the ``default`` namespace emptied for it."""

    name: Final = "real"

    def __init__(self, plane: ControlPlane, *, simulate: bool) -> None:
        self.plane = plane
        self.proxy = FaultProxy.before(plane).start()
        self.faults: Faults = self.proxy.faults
        self.admin = admin_client(plane)
        for collection in _COLLECTIONS:  # what the module's earlier tests left
            self.admin.request("DELETE", collection)
        _, version = self.admin.list(RUNS.path(NAMESPACE)).unwrap()
        self._runs = Events(self.admin.watch(RUNS.path(NAMESPACE), version, timeout_seconds=600, bookmarks=False))
        self._seen: list[RunVersion] = []
        self.simulator: SimulatorClient | None = None
        if simulate:
            self.simulator = SimulatorClient(
                admin_client(plane),
                ClientSettings(namespace=NAMESPACE, follow_runtimes=True, heartbeat_interval=1.0, runs=None, qps=0),
            )
            self.simulator.start()
            assert self.simulator.wait_synced(30), "the runtime simulator did not sync"

    def kubeconfig_path(self, directory: Path, *, namespace: str = NAMESPACE) -> Path:
        """The admin's kubeconfig: what a test writes with."""
        return self.plane.admin_kubeconfig

    def scheduler_kubeconfig(self, directory: Path) -> Path:
        """The scheduler's own ServiceAccount token through the fault proxy: deploy/ RBAC applies to
        all it does, and ``faults`` to what it sends."""
        return self.plane.service_account_kubeconfig(directory / "scheduler.kubeconfig", *SCHEDULER_ACCOUNT, server=self.proxy.server)

    def add_runtime(self, name: str, *, replicas: int = 1, capacity: Mapping[str, str] | None = None,
                    namespace: str = NAMESPACE) -> JSONObject:
        body: dict[str, Any] = {
            "apiVersion": "kruntimes.io/v1alpha1",
            "kind": "Runtime",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "capacity": {"resources": dict(capacity or {"runs": "2"})},
                "template": {"spec": {"containers": [{"name": "runtime", "image": "kruntimes/runtime:test"}]}},
            },
        }
        return self.admin.create(f"/apis/kruntimes.io/v1alpha1/namespaces/{namespace}/runtimes", body).unwrap()

    def history(self) -> list[RunVersion]:
        """Every version of every Run committed since this view opened, in commit order: read until
        the watch has delivered the newest version a list shows now."""
        items, _ = self.admin.list(RUNS.path(NAMESPACE)).unwrap()
        newest = max((int(resource_version_of(item)) for item in items), default=0)
        deadline = time.monotonic() + 30
        while not self._seen or int(resource_version_of(self._seen[-1].object)) < newest:
            if time.monotonic() > deadline:
                raise AssertionError(f"the watch of Runs did not reach resourceVersion {newest}")
            try:
                event = self._runs.queue.get(timeout=1)
            except queue.Empty:
                continue
            meta = event.object.get("metadata")
            assert isinstance(meta, Mapping)
            self._seen.append(RunVersion(_Resource("runs"), event.type, str(meta.get("namespace")), str(meta.get("name")), event.object))
        return list(self._seen)

    def accepted_writes(self) -> list[RequestInfo]:
        """The scheduler's writes the server accepted (answered 2xx, whatever the proxy then told the
        scheduler), oldest first: on the dev cluster, ``history()``'s records with its user agent."""
        return [e.info for e in self.proxy.history()
                if e.info is not None and e.info.verb in WRITE_VERBS and 200 <= e.forwarded_status < 300]

    def close(self) -> None:
        if self.simulator is not None:
            self.simulator.stop()
        self._runs.stop()
        self.admin.close()
        self.proxy.stop()
        assert self.proxy.failures == [], f"the fault proxy itself failed: {self.proxy.failures}"
        refused = [e for e in self.proxy.history() if e.forwarded_status in (401, 403)]
        assert refused == [], f"the API server refused the scheduler (deploy/ RBAC): {refused}"


# --- what a test reads the same way on both servers ----------------------------------------------


def scheduler_kubeconfig(server: DevCluster | RealCluster, directory: Path) -> Path:
    """What a scheduler (in process or ``kruntimes scheduler``) runs on: on the real server its
    ServiceAccount's token through the fault proxy."""
    return server.scheduler_kubeconfig(directory) if isinstance(server, RealCluster) else server.kubeconfig_path(directory)


def proxied_kubeconfig(server: DevCluster | RealCluster, directory: Path) -> Path:
    """The test's own credentials, for a client whose requests ``server.faults`` judges and
    :func:`accepted_writes` records like the scheduler's (on the real server: through the proxy)."""
    if isinstance(server, RealCluster):
        return server.proxy.kubeconfig(directory / "proxied.kubeconfig", server.plane.admin_token, namespace=NAMESPACE)
    return server.kubeconfig_path(directory)


def accepted_writes(server: DevCluster | RealCluster) -> list[RequestInfo]:
    """Writes the server accepted, each with its client's User-Agent, oldest first. On the real
    server only those that went through the fault proxy (the scheduler's, and a client's on
    :func:`proxied_kubeconfig`); the dev cluster records every client's."""
    if isinstance(server, RealCluster):
        return server.accepted_writes()
    return [RequestInfo(w.verb, w.resource.group, w.resource.plural, w.subresource, w.namespace, w.name, w.user_agent)
            for w in server.history()]


def settled_writes(server: DevCluster | RealCluster, written: Iterable[tuple[str, str]]) -> list[RequestInfo]:
    """:func:`accepted_writes` once they hold a status write of each Run in ``written`` (namespace,
    name). On the real server the fault proxy records a write when the server's answer reaches it:
    a test that has just read a Run's new status straight from the server can be ahead of that record."""
    expected = set(written)
    assert expected, "name the Runs whose status writes the record must hold"

    def settled() -> list[RequestInfo] | None:
        writes = accepted_writes(server)
        seen = {(w.namespace, w.name) for w in writes if w.resource == "runs" and w.subresource == "status"}
        return writes if expected <= seen else None

    return wait_until(settled, timeout=10.0, what=f"the record of the status writes of {sorted(expected)}")


def status_writers(
    server: DevCluster | RealCluster, written: Iterable[tuple[str, str]], prefix: str = "kruntimes-scheduler/"
) -> dict[str, set[str]]:
    """By namespace, the User-Agents starting with ``prefix`` whose writes of a Run's status the
    server accepted (``kruntimes-scheduler/<identity>``: which replica wrote where), once the record
    holds the status writes of the Runs in ``written`` (:func:`settled_writes`)."""
    writers: dict[str, set[str]] = {}
    for write in settled_writes(server, written):
        if write.resource == "runs" and write.subresource == "status" and write.user_agent.startswith(prefix):
            writers.setdefault(write.namespace, set()).add(write.user_agent)
    return writers
