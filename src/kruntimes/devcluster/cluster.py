"""The in-process handle: start a dev cluster on a background thread, use it, stop it cleanly.

    with DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1)) as cluster:
        kubeconfig = cluster.kubeconfig_path(tmp_path)
        cluster.add_runtime("python", replicas=3, capacity={"runs": "2"})
        cluster.faults.conflict("runs", subresource="status")
        records = cluster.history()
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, TypedDict, Unpack, final

import yaml

from kruntimes.devcluster.auth import Authorizer
from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.faults import Faults
from kruntimes.devcluster.http import DevClusterHTTPServer, ServerSettings
from kruntimes.devcluster.kubeconfig import CONTEXT_NAME, write_private
from kruntimes.devcluster.resources import CRD_RESOURCE, KRUNTIMES_RESOURCES, ResourceDef, ResourceRegistry, crd_manifest
from kruntimes.devcluster.celrules import warm_up
from kruntimes.devcluster.schema import compile_schema_rules
from kruntimes.devcluster.service import ObjectService
from kruntimes.devcluster.simulator import RUNTIMES, RuntimeSimulator, SimulatorSettings
from kruntimes.devcluster.store import DEFAULT_EVENT_WINDOW, Store, WriteContext, WriteRecord
from kruntimes.devcluster.types import GroupResource, Obj, json_copy

STARTUP_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_RUNTIME_IMAGE: Final = "ghcr.io/kruntimes/dev-runtime:latest"
_SETUP: Final = WriteContext("create", user_agent="kruntimes-devcluster/setup")


class ClusterOptions(TypedDict, total=False):
    """The keyword arguments of :class:`DevCluster` (see its ``__init__``), so ``start`` is type-checked too."""

    host: str
    port: int
    token: str | None
    authorizer: Authorizer
    simulator: SimulatorSettings | None
    event_window: int
    bookmark_interval: float
    auto_create_namespaces: bool
    fault_seed: int | None
    log_requests: bool
    keep_write_history: bool
    custom_resources: tuple[ResourceDef, ...]
    crd_paths: Sequence[Path]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@final
class DevCluster:
    """A running dev cluster: HTTP server thread, store, fault rules and (optionally) the runtime simulator."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        authorizer: Authorizer = Authorizer(),
        simulator: SimulatorSettings | None = SimulatorSettings(),
        event_window: int = DEFAULT_EVENT_WINDOW,
        bookmark_interval: float = 60.0,
        auto_create_namespaces: bool = False,
        fault_seed: int | None = None,
        log_requests: bool = False,
        keep_write_history: bool = True,
        custom_resources: tuple[ResourceDef, ...] = KRUNTIMES_RESOURCES,
        crd_paths: Sequence[Path] = (),
    ) -> None:
        """Build (not start) a cluster. ``simulator=None`` disables the runtime simulator;
        ``event_window`` is how many events a watch can resume across; ``custom_resources``
        are installed as CRDs at start, then the CRD manifests in ``crd_paths`` (files or
        directories of YAML), which replace built-in definitions of the same name. ``token`` is the
        administrator's bearer token; ``authorizer`` adds users (their tokens are accepted too) and
        the ABAC policy that answers SubjectAccessReviews (``devcluster/auth.py``)."""
        self.store = Store(event_window=event_window, keep_writes=keep_write_history)
        self.registry = ResourceRegistry()
        self.service = ObjectService(self.store, self.registry, auto_create_namespaces=auto_create_namespaces)
        self.faults = Faults(self.store, seed=fault_seed)
        self.settings = ServerSettings(
            token=token,
            authorizer=Authorizer(admin_token=token, tokens=authorizer.tokens, policy=authorizer.policy),
            bookmark_interval=bookmark_interval, log_requests=log_requests)
        self.simulator = RuntimeSimulator(self.service, simulator) if simulator is not None else None
        self._address = (host, port)
        self._custom_resources = custom_resources
        self._crd_paths = tuple(crd_paths)
        self._server: DevClusterHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    def start(cls, **options: Unpack[ClusterOptions]) -> DevCluster:
        """Build with ``options`` (see ``__init__``), then :meth:`run`. Use as a context manager."""
        cluster = cls(**options)
        cluster.run()
        return cluster

    def run(self) -> None:
        if self._server is not None:
            raise RuntimeError("this dev cluster is already running")
        for name in STARTUP_NAMESPACES:
            self.service.ensure_namespace(name)
        crd_rd = self.registry.storage(CRD_RESOURCE)
        assert crd_rd is not None
        by_resource: dict[GroupResource, list[ResourceDef]] = {}
        for d in self._custom_resources:
            by_resource.setdefault(d.resource, []).append(d)
        for defs in by_resource.values():
            self.service.create(crd_rd, "", crd_manifest(defs), _SETUP)
        self.install_crds(self._crd_paths)
        for rd in self.registry.all():  # compile every CEL rule now (once per process), not in the first request
            if rd.schema is not None:
                compile_schema_rules(rd.schema)
        warm_up()  # and evaluate one, so cel-python's lazy imports do not stall the first write
        self._server = DevClusterHTTPServer(self._address, self.service, self.faults, self.settings)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="devcluster-http", daemon=True)
        self._thread.start()
        if self.simulator is not None:
            self.simulator.start()

    def stop(self) -> None:
        """Stop the simulator, end watches, close every connection and join every thread. Idempotent."""
        if self.simulator is not None:
            self.simulator.stop()
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def __enter__(self) -> DevCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- addresses and kubeconfig -------------------------------------------------------------

    @property
    def host(self) -> str:
        return self._address[0]

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the dev cluster is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}"

    def kubeconfig(self, *, namespace: str = "default") -> Obj:
        """A kubeconfig (cluster, user, context) pointing kubectl and the Python client at this server."""
        user: Obj = {"token": self.settings.token} if self.settings.token else {}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": self.url}}],
            "users": [{"name": CONTEXT_NAME, "user": user}],
            "contexts": [{"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME, "namespace": namespace}}],
            "current-context": CONTEXT_NAME,
            "preferences": {},
        }

    def kubeconfig_text(self, *, namespace: str = "default") -> str:
        return yaml.safe_dump(self.kubeconfig(namespace=namespace), sort_keys=False)

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """Write :meth:`kubeconfig` to ``path`` (mode 0600, never through a symlink; an existing file
        only if a dev cluster wrote it: ``devcluster/kubeconfig.py``); raises ``KubeconfigError``."""
        return write_private(path, self.kubeconfig_text(namespace=namespace))

    def kubeconfig_path(self, directory: Path, *, namespace: str = "default") -> Path:
        """Write ``kubeconfig`` into ``directory`` and return the file's path."""
        return self.write_kubeconfig(directory / f"{CONTEXT_NAME}.kubeconfig", namespace=namespace)

    # -- conveniences for tests -----------------------------------------------------------------

    def install_crds(self, paths: Sequence[Path]) -> list[str]:
        """Create or replace every CustomResourceDefinition in these YAML files/directories; returns their names."""
        crd_rd = self.registry.storage(CRD_RESOURCE)
        assert crd_rd is not None
        installed: list[str] = []
        for path in paths:
            files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
            for file in files:
                for doc in yaml.safe_load_all(file.read_text()):
                    if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                        continue
                    name = str(doc.get("metadata", {}).get("name", ""))
                    try:
                        self.service.create(crd_rd, "", doc, _SETUP)
                    except ApiError as exc:
                        if exc.reason != "AlreadyExists":
                            raise
                        current = self.service.get(crd_rd, "", name)
                        replacement = {**doc, "metadata": {**doc.get("metadata", {}), "resourceVersion": current["metadata"]["resourceVersion"]}}
                        self.service.update(crd_rd, "", name, replacement, WriteContext("update", user_agent=_SETUP.user_agent))
                    installed.append(name)
        return installed

    def history(self, since: int = 0) -> list[WriteRecord]:
        """Every committed object version after resourceVersion ``since``, in commit order.

        Records share the stored objects: read them, never mutate them."""
        return self.store.writes(since)

    def add_runtime(self, name: str, *, replicas: int = 1, capacity: Mapping[str, str] | None = None, namespace: str = "default", image: str = DEFAULT_RUNTIME_IMAGE) -> Obj:
        """Create a ``Runtime`` whose pods run ``image`` (the simulator, when on, brings up its pods)."""
        rd = self.registry.storage(RUNTIMES)
        if rd is None:
            raise RuntimeError("the Runtime kind is not installed in this dev cluster")
        body: Obj = {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "capacity": {"resources": dict(capacity or {"runs": "2"})},
                # the CRD requires a pod template whose first container is named runtime
                "template": {"spec": {"containers": [{"name": "runtime", "image": image}]}},
            },
        }
        return json_copy(self.service.create(rd, namespace, body, _SETUP))
