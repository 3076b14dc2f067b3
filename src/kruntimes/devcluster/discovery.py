"""Discovery and OpenAPI v3 documents derived from the live resource table.

kubectl resolves ``runs``/``rn`` through discovery (``/api``, ``/apis``,
``/apis/<group>/<version>``) and, before ``apply``, reads OpenAPI v3: it looks
for the PATCH operation tagged with the kind's
``x-kubernetes-group-version-kind`` and checks that it accepts the
``fieldValidation`` query parameter. Finding it, kubectl sends
``fieldValidation=Strict`` and leaves validation to the server (see
:mod:`kruntimes.devcluster.schema`); not finding it (a ``kind: List``, whose ``v1/List`` has no
v3 entry), kubectl validates client side against OpenAPI v2, which
:mod:`kruntimes.devcluster.openapi_v2` serves.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Final, final

from kruntimes.devcluster import openapi_v2
from kruntimes.devcluster.resources import ALL_VERBS, STATUS_VERBS, ResourceDef, ResourceRegistry
from kruntimes.devcluster.types import Obj

SERVER_VERSION: Final[Obj] = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-kruntimes-devcluster",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_BUILTIN_SCHEMA_PREFIX: Final = {"": "io.k8s.api.core", "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions"}


def schema_id(rd: ResourceDef) -> str:
    """The component-schema name a real server uses (reverse-DNS group for CRDs)."""
    if rd.custom:
        return ".".join(reversed(rd.group.split("."))) + f".{rd.version}.{rd.kind}"
    prefix = _BUILTIN_SCHEMA_PREFIX.get(rd.group, "io.k8s.api." + rd.group.split(".")[0])
    return f"{prefix}.{rd.version}.{rd.kind}"


def api_resource_list(registry: ResourceRegistry, group: str, version: str) -> Obj | None:
    defs = [d for d in registry.all() if d.group == group and d.version == version]
    if not defs:
        return None
    resources: list[Obj] = []
    for d in defs:
        entry: Obj = {"name": d.plural, "singularName": d.singular, "namespaced": d.namespaced, "kind": d.kind, "verbs": list(ALL_VERBS)}
        if d.short_names:
            entry["shortNames"] = list(d.short_names)
        if d.categories:
            entry["categories"] = list(d.categories)
        resources.append(entry)
        if d.status_subresource:
            resources.append({"name": f"{d.plural}/status", "singularName": "", "namespaced": d.namespaced, "kind": d.kind, "verbs": list(STATUS_VERBS)})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": defs[0].api_version, "resources": resources}


def api_versions(server_address: str) -> Obj:
    return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group(name: str, versions: list[str]) -> Obj:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry: ResourceRegistry) -> Obj:
    groups = [_group(g, vs) for g, vs in registry.group_versions().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: ResourceRegistry, name: str) -> Obj | None:
    versions = registry.group_versions().get(name)
    if not name or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


# -- OpenAPI v3 --------------------------------------------------------------------------


def _operation(rd: ResourceDef, action: str, ref: str, *, query: tuple[str, ...] = ()) -> Obj:
    response = {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}}
    op: Obj = {
        "operationId": f"{action}{rd.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rd.group, "version": rd.version, "kind": rd.kind},
        "responses": {"200": response},
    }
    if query:
        op["parameters"] = [{"name": q, "in": "query", "schema": {"type": "string"}, "uniqueItems": True} for q in query]
    if action in ("post", "put", "patch"):
        op["requestBody"] = {"content": {"application/json": {"schema": {"$ref": ref}}}}
    return op


_WRITE_QUERY: Final = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _paths(rd: ResourceDef) -> dict[str, Obj]:
    ref = f"#/components/schemas/{schema_id(rd)}"
    base = f"/{rd.group_version_path}"
    scope = f"{base}/namespaces/{{namespace}}/{rd.plural}" if rd.namespaced else f"{base}/{rd.plural}"
    item = {
        "get": _operation(rd, "get", ref),
        "put": _operation(rd, "put", ref, query=_WRITE_QUERY),
        "patch": _operation(rd, "patch", ref, query=(*_WRITE_QUERY, "force")),
        "delete": _operation(rd, "delete", ref, query=("dryRun", "gracePeriodSeconds", "propagationPolicy")),
    }
    paths = {
        scope: {"get": _operation(rd, "list", ref), "post": _operation(rd, "post", ref, query=_WRITE_QUERY)},
        f"{scope}/{{name}}": item,
    }
    if rd.status_subresource:
        paths[f"{scope}/{{name}}/status"] = {k: item[k] for k in ("get", "put", "patch")}
    return paths


def _component(rd: ResourceDef) -> Obj:
    schema: dict[str, Any] = json.loads(json.dumps(rd.schema)) if rd.schema else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"allOf": [{"$ref": f"#/components/schemas/{_OBJECT_META}"}], "default": {}}
    schema["x-kubernetes-group-version-kind"] = [{"group": rd.group, "version": rd.version, "kind": rd.kind}]
    return schema


def openapi_document(registry: ResourceRegistry, group_version_path: str) -> Obj | None:
    defs = [d for d in registry.all() if d.group_version_path == group_version_path]
    if not defs:
        return None
    paths: dict[str, Obj] = {}
    schemas: dict[str, Obj] = {_OBJECT_META: {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    for d in defs:
        paths.update(_paths(d))
        schemas[schema_id(d)] = _component(d)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kruntimes dev-cluster)", "version": SERVER_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    }


@final
class OpenApiCache:
    """Rendered OpenAPI documents and their hashes, rebuilt when the resource table changes."""

    def __init__(self, registry: ResourceRegistry) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._generation = -1
        self._docs: dict[str, bytes] = {}
        self._v2: tuple[bytes, bytes] = (b"", b"")

    def _refresh(self) -> dict[str, bytes]:
        with self._lock:
            if self._generation != self._registry.generation:
                self._generation = self._registry.generation
                paths = sorted({d.group_version_path for d in self._registry.all()})
                docs = {p: openapi_document(self._registry, p) for p in paths}
                self._docs = {p: json.dumps(doc).encode() for p, doc in docs.items() if doc is not None}
                v2 = openapi_v2.document(self._registry.all(), schema_id, str(SERVER_VERSION["gitVersion"]))
                self._v2 = (json.dumps(v2).encode(), openapi_v2.document_message(v2))
            return self._docs

    def v2(self, *, protobuf: bool) -> bytes:
        """The ``/openapi/v2`` document as JSON, or as the gnostic protobuf message client-go decodes."""
        self._refresh()
        with self._lock:
            return self._v2[1] if protobuf else self._v2[0]

    def index(self) -> Obj:
        return {
            "paths": {
                path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={hashlib.sha512(body).hexdigest()[:64].upper()}"}
                for path, body in self._refresh().items()
            }
        }

    def document(self, group_version_path: str) -> bytes | None:
        return self._refresh().get(group_version_path)
