"""In-process schedulers against a dev cluster, and a recorder of every API request the dev server authorizes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from kruntimes.devcluster import DevCluster
from kruntimes.devcluster.faults import RequestInfo, Verdict
from kruntimes.devcluster.store import WriteContext
from kruntimes.devcluster.types import GroupResource, Obj
from kruntimes.kubeclient.kube import Kube, load_configuration
from kruntimes.effects.runner import Scheduler, SchedulerOptions
from tests import polling

T = TypeVar("T")
RUNS = GroupResource("kruntimes.io", "runs")
PODS = GroupResource("", "pods")
HOSTILE_AGENT = "kruntimes-tests/hostile"


def client(cluster: DevCluster, directory: Path, agent: str) -> Kube:
    loaded = load_configuration(str(cluster.kubeconfig_path(directory))).unwrap()
    return Kube(loaded.configuration, request_timeout=10, user_agent=agent)


@contextmanager
def scheduler(cluster: DevCluster, directory: Path, identity: str = "sec", **overrides: Any) -> Iterator[Scheduler]:
    options = SchedulerOptions(
        identity=identity, workers=4, metrics_bind_address="127.0.0.1:0", health_probe_bind_address="127.0.0.1:0",
        heartbeat_stale_after=timedelta(seconds=15), watch_timeout=30,
    )
    kube = client(cluster, directory, f"kruntimes-scheduler/{identity}")
    running = Scheduler(kube, replace(options, **overrides))
    running.start()
    try:
        assert running.wait_ready(10), "scheduler did not become ready"
        yield running
    finally:
        assert running.stop(timeout=10)
        kube.close()


def wait_until(probe: Callable[[], T | None], timeout: float = 20.0, what: str = "condition") -> T:
    """The shared poller with a longer default: these tests run whole scheduler processes."""
    return polling.wait_until(probe, timeout=timeout, what=what)


def create(cluster: DevCluster, resource: GroupResource, namespace: str, body: Obj, agent: str = HOSTILE_AGENT, subresource: str = "") -> Obj:
    """Write in-process, as a client would (schemas and validation apply)."""
    rd = cluster.registry.storage(resource)
    assert rd is not None
    created = cluster.service.create(rd, namespace, body, WriteContext("create", user_agent=agent))
    if subresource == "status" and "status" in body:
        created = cluster.service.update(rd, namespace, created["metadata"]["name"], {**created, "status": body["status"]}, WriteContext("update", "status", agent))
    return created


def run_phase(cluster: DevCluster, namespace: str, name: str) -> str:
    from kruntimes.devcluster.types import ObjectKey

    obj = cluster.store.read(RUNS, ObjectKey(namespace, name))
    return "" if obj is None else str((obj.get("status") or {}).get("phase") or "")


def runs(cluster: DevCluster) -> list[Obj]:
    return cluster.store.list_objects(RUNS)[0]


@dataclass(frozen=True, slots=True)
class Seen:
    """One request as the dev server's authorizer would see it, with its User-Agent."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    user_agent: str


class RequestRecorder:
    """Wraps ``cluster.faults.check`` (called for every resource request, reads included) to record it.

    The dev server's own request log (``log_requests=True``) prints the request line only, without
    the User-Agent, so it cannot attribute reads to the scheduler; this hook can.
    """

    def __init__(self, cluster: DevCluster) -> None:
        self.seen: list[Seen] = []
        original = cluster.faults.check

        def check(info: RequestInfo) -> Verdict:
            self.seen.append(Seen(info.verb, info.group, info.resource, info.subresource, info.namespace, info.name, info.user_agent))
            return original(info)

        setattr(cluster.faults, "check", check)  # noqa: B010 (an instance attribute shadowing the method, on purpose)

    def by(self, prefix: str) -> list[Seen]:
        return [s for s in self.seen if s.user_agent.startswith(prefix)]
