"""The HTTP servers of the scheduler process: ``/metrics`` and the probes, on one port or two."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from kruntimes.kubeclient.kube import Kube
from kruntimes.effects.metrics import (
    ALL_ENDPOINTS,
    METRICS_ENDPOINTS,
    PROBE_ENDPOINTS,
    MetricsServer,
    Probes,
    SchedulerMetrics,
    serve,
)
from kruntimes.effects.runner.options import ListenError, SchedulerOptions, parse_bind_address
from kruntimes.kubeclient.secureserving import secure_serving


class Listening(NamedTuple):
    servers: list[MetricsServer]
    metrics_url: str | None
    """``http://host:port`` of ``/metrics`` (``None`` when disabled)."""
    health_url: str | None
    """``http://host:port`` of ``/healthz`` and ``/readyz`` (``None`` when disabled)."""


@contextmanager
def listening(flag: str, address: str) -> Iterator[None]:
    try:
        yield
    except OSError as problem:
        raise ListenError(flag, address, problem) from problem


def start_servers(kube: Kube, options: SchedulerOptions, metrics: SchedulerMetrics, probes: Probes) -> Listening:
    """Listen on the addresses of ``options``; raises :class:`ListenError` (having closed what it opened)
    when one cannot be listened on."""
    tls = options.metrics_secure
    secure = None if tls is None else secure_serving(kube, tls, metrics.registry)
    metrics_at = parse_bind_address(options.metrics_bind_address)
    health_at = parse_bind_address(options.health_probe_bind_address)
    registry, dropped = metrics.registry, metrics.count_dropped_connection
    if metrics_at is not None and metrics_at == health_at and metrics_at[1] != 0:
        with listening("--metrics-bind-address and --health-probe-bind-address", options.metrics_bind_address):
            server = serve(registry, probes, metrics_at[0], metrics_at[1], endpoints=ALL_ENDPOINTS, secure=secure, on_drop=dropped)
        return Listening([server], server.url, server.url)
    servers: list[MetricsServer] = []
    metrics_url = health_url = None
    try:
        if metrics_at is not None:
            with listening("--metrics-bind-address", options.metrics_bind_address):
                server = serve(registry, probes, metrics_at[0], metrics_at[1], endpoints=METRICS_ENDPOINTS, secure=secure, on_drop=dropped)
            servers.append(server)
            metrics_url = server.url
        if health_at is not None:
            with listening("--health-probe-bind-address", options.health_probe_bind_address):
                server = serve(registry, probes, health_at[0], health_at[1], endpoints=PROBE_ENDPOINTS, on_drop=dropped)
            servers.append(server)
            health_url = server.url
    except ListenError:
        for server in servers:
            server.close()
        raise
    return Listening(servers, metrics_url, health_url)
