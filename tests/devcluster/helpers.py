"""Typed glue between the tests and their clients: kubeconfig-built Python client, watches, kubectl, polling."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import urllib3
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.watch import Watch

from kruntimes.devcluster import DevCluster
from tests.polling import wait_until as wait_until  # re-exported for the devcluster tests

T = TypeVar("T")
GROUP, VERSION = "kruntimes.io", "v1alpha1"




def as_obj(value: object) -> dict[str, Any]:
    """The custom-objects API returns ``object``; its payloads are JSON objects."""
    assert isinstance(value, dict), value
    return cast(dict[str, Any], value)


# kubernetes.config and kubernetes.watch ship no annotations: these casts state the signatures we rely on.
class _WatchApi(Protocol):
    def stream(self, func: Callable[..., object], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]: ...

    def stop(self) -> None: ...


class _Closable(Protocol):
    def close(self) -> None: ...


_new_watch = cast(Callable[[], _WatchApi], Watch)
_client_from_config = cast(Callable[..., client.ApiClient], kube_config.new_client_from_config)


def api_client(kubeconfig: Path) -> client.ApiClient:
    """An ApiClient configured from a kubeconfig file, exactly as an operator would build one."""
    return _client_from_config(config_file=str(kubeconfig))


def close_api(api: client.ApiClient) -> None:
    cast(_Closable, api).close()


@dataclass
class Kube:
    """The official client's APIs against one dev cluster."""

    api: client.ApiClient
    custom: client.CustomObjectsApi
    core: client.CoreV1Api

    def run(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return as_obj(self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "runs", name))

    def create_run(self, name: str, *, runtime: str = "python", namespace: str = "default", labels: dict[str, str] | None = None, generate: bool = False, **spec: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {"generateName": name} if generate else {"name": name}
        if labels:
            meta["labels"] = labels
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Run", "metadata": meta, "spec": {"runtime": runtime, "mode": {"task": {}}, **spec}}
        return as_obj(self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "runs", body))

    def patch_run_status(self, name: str, status: dict[str, Any], *, resource_version: str | None = None, namespace: str = "default") -> dict[str, Any]:
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return as_obj(self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "runs", name, body))

    def list_runs(self, namespace: str = "default", **kwargs: Any) -> dict[str, Any]:
        return as_obj(self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "runs", **kwargs))


def kube_for(kubeconfig: Path) -> Kube:
    api = api_client(kubeconfig)
    return Kube(api, client.CustomObjectsApi(api), client.CoreV1Api(api))


class WatchCollector:
    """Runs ``kubernetes.watch.Watch().stream(func, ...)`` on a thread and collects its raw events in order."""

    def __init__(self, func: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._watch = _new_watch()
        self._stopping = False
        stream = self._watch.stream(func, *args, **kwargs)
        self._thread = threading.Thread(target=self._consume, args=(stream,), daemon=True)
        self._thread.start()

    def _consume(self, stream: Iterator[dict[str, Any]]) -> None:
        try:
            for event in stream:
                with self._lock:
                    self.events.append({"type": event["type"], "object": event["raw_object"]})
        except (urllib3.exceptions.ProtocolError, OSError):
            if not self._stopping:
                raise
        except BaseException as exc:
            self.error = exc

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        def enough() -> list[dict[str, Any]] | None:
            if self.error is not None:
                raise self.error
            events = self.snapshot()
            return events if len(events) >= count else None

        return wait_until(enough, timeout=timeout, what=f"{count} watch events")

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the stream to end by itself (server timeout or error)."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "watch did not end"

    def stop(self) -> None:
        self._stopping = True
        self._watch.stop()
        self._thread.join(5)


class LineReader:
    """Reads a subprocess's stdout on a thread so a test can wait for a line without blocking forever."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self._stdout = proc.stdout
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait_for(self, predicate: Callable[[str], bool], *, timeout: float = 10.0, what: str = "a line") -> str:
        return wait_until(lambda: next((line for line in self.snapshot() if predicate(line)), None), timeout=timeout, what=what)


def raw(cluster: DevCluster) -> urllib3.PoolManager:
    """A plain HTTP client, for what the typed clients cannot express (Accept headers, bad bodies)."""
    del cluster
    return urllib3.PoolManager(retries=False)


def request_json(http: urllib3.PoolManager, method: str, url: str, body: Any = None, *, content_type: str = "application/json", headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], urllib3.BaseHTTPResponse]:
    data = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
    all_headers = {"Content-Type": content_type, **(headers or {})}
    resp = http.request(method, url, body=data, headers=all_headers)
    payload = json.loads(resp.data) if resp.data and resp.headers.get("Content-Type", "").startswith("application/json") else {}
    return resp.status, cast(dict[str, Any], payload), resp
