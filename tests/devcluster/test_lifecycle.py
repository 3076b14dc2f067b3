"""Starting and stopping: no thread, socket or watch outlives a stopped dev cluster."""

from __future__ import annotations

import socket
import threading

import pytest
import urllib3

from kruntimes.devcluster import DevCluster, SimulatorSettings


def test_stopping_ends_watches_and_joins_every_thread_it_started() -> None:
    before = set(threading.enumerate())
    cluster = DevCluster.start(simulator=SimulatorSettings(heartbeat_interval=1.0))
    cluster.add_runtime("python", replicas=2)
    http = urllib3.PoolManager(retries=False)
    assert http.request("GET", cluster.url + "/api").status == 200  # leaves an idle keep-alive connection
    watch = http.request("GET", cluster.url + "/api/v1/namespaces/default/pods?watch=1", preload_content=False)
    port = cluster.port
    cluster.stop()
    assert watch.read() is not None  # the stream ended instead of hanging
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    cluster.stop()  # idempotent


def test_the_default_bind_address_is_loopback() -> None:
    with DevCluster.start(simulator=None) as cluster:
        assert cluster.url.startswith("http://127.0.0.1:")
        assert cluster.kubeconfig()["clusters"][0]["cluster"]["server"] == cluster.url
