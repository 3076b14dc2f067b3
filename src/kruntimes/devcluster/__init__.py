"""A local, in-memory Kubernetes API server for development and tests, never for production.

It speaks the Kubernetes wire protocol (discovery, OpenAPI v3, Tables, watches,
conflicts, the status subresource) well enough for the real ``kubectl`` and the
official Python client, keeps everything in memory, and binds to 127.0.0.1
unless told otherwise.

Layout, bottom up: ``store`` (versioned objects, history, watch fan-out) ->
``service`` (the verbs with Kubernetes semantics; ``schema``, ``patches``,
``selectors`` help it) -> ``http`` (REST paths, negotiation, streaming;
``discovery``, ``tables``, ``faults`` help it) -> ``cluster`` (the in-process
handle) -> ``command`` (``kruntimes dev-cluster``). ``simulator`` plays the
Runtime controller and runtimed through ``service``.
"""

from kruntimes.devcluster.cluster import DevCluster
from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.faults import Faults, FaultRule, RequestInfo
from kruntimes.devcluster.resources import KRUNTIMES_RESOURCES, PrinterColumn, ResourceDef, crd_manifest
from kruntimes.devcluster.simulator import RuntimeSimulator, SimulatorSettings
from kruntimes.devcluster.store import WriteRecord

__all__ = [
    "ApiError",
    "DevCluster",
    "FaultRule",
    "Faults",
    "KRUNTIMES_RESOURCES",
    "PrinterColumn",
    "RequestInfo",
    "ResourceDef",
    "RuntimeSimulator",
    "SimulatorSettings",
    "WriteRecord",
    "crd_manifest",
]
