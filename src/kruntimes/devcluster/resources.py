"""The resource table: which kinds the dev cluster serves, as data.

The kruntimes kinds are served from the project's own CRDs, ``deploy/crds``,
shipped as package data in ``kruntimes/devcluster/crds/`` (a test keeps the
copy identical), so the dev cluster enforces exactly the schema a real API
server enforces: names, short names, scope, subresources, printer columns and
the whole ``openAPIV3Schema`` with its defaults and CEL rules
(:mod:`kruntimes.devcluster.schema`). ``DevCluster(crd_paths=...)`` and
``kruntimes dev-cluster --crds PATH`` replace them with other CRD files.

Built-in kinds (pods, namespaces, events, leases, CRDs) are rows of
:data:`BUILTIN_RESOURCES`. The kruntimes kinds are *not* wired in: they are
rows of :data:`KRUNTIMES_RESOURCES`, read from the CRD manifests by
:func:`definitions_from_crd`, rendered back by :func:`crd_manifest` and
installed at start through the same path as ``kubectl apply -f crd.yaml``. So
a CRD a test applies and the ones the server ships are served by one mechanism.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
import importlib.resources as package_files
from typing import Any, Final, final

import yaml

from kruntimes.devcluster.errors import ApiError, invalid
from kruntimes.devcluster.schema import compile_schema_rules
from kruntimes.devcluster.types import GroupResource, Obj

ALL_VERBS: Final = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS: Final = ("get", "patch", "update")


@final
@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry: a header and a JSONPath into each object."""

    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""


AGE: Final = PrinterColumn(
    "Age",
    "date",
    ".metadata.creationTimestamp",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)


@final
@dataclass(frozen=True, slots=True)
class ResourceDef:
    """Everything the server needs to serve one resource at one version.

    ``selectable_fields`` are field-selector paths beyond ``metadata.name`` and
    ``metadata.namespace`` (the CRD ``selectableFields`` mechanism).
    ``schema`` is the ``openAPIV3Schema``: used for OpenAPI, and applied to every
    write by :mod:`kruntimes.devcluster.schema` (pruning, defaulting, validation, CEL rules).
    """

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...] = ()
    namespaced: bool = True
    status_subresource: bool = False
    printer_columns: tuple[PrinterColumn, ...] = (AGE,)
    selectable_fields: tuple[str, ...] = ()
    schema: Mapping[str, Any] | None = None
    categories: tuple[str, ...] = ()
    custom: bool = False
    """Served from a CRD: strategic merge patch is refused and status is dropped on create."""
    allow_create_on_update: bool = False
    allow_unconditional_update: bool = True
    status_on_create: Mapping[str, Any] | None = None
    """What ``status`` becomes on create when the kind has a status subresource (None: removed)."""
    returns_deleted_object: bool = False
    """A delete that removes the object at once answers with the object (pods, as kube-apiserver's
    pod storage does); otherwise with a ``Status`` of ``Success`` naming it."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def resource(self) -> GroupResource:
        return GroupResource(self.group, self.plural)

    @property
    def group_version_path(self) -> str:
        """``api/v1`` or ``apis/<group>/<version>``: the URL prefix and the OpenAPI v3 index key."""
        return f"apis/{self.group}/{self.version}" if self.group else f"api/{self.version}"


# -- the kruntimes kinds (SPEC §1) -------------------------------------------------

KRUNTIMES_GROUP: Final = "kruntimes.io"
_SAFE_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CRD_PACKAGE: Final = "kruntimes.devcluster.crds"
"""The project's CRDs (``deploy/crds``), shipped inside the package so an installed dev cluster serves them too."""


def kruntimes_crds() -> tuple[Obj, ...]:
    """The ``CustomResourceDefinition`` manifests of the kruntimes kinds, as shipped (a copy of ``deploy/crds``)."""
    docs: list[Obj] = []
    for entry in package_files.files(CRD_PACKAGE).iterdir():
        if entry.name.endswith((".yaml", ".yml")):
            docs.extend(d for d in yaml.load_all(entry.read_text(encoding="utf-8"), Loader=_SAFE_LOADER) if isinstance(d, dict))
    order = {plural: i for i, plural in enumerate(("runs", "runtimes", "persistentworkspaces"))}
    return tuple(sorted(docs, key=lambda d: (order.get(str(d.get("spec", {}).get("names", {}).get("plural")), len(order)), str(d.get("metadata", {}).get("name")))))


# -- built-in kinds ------------------------------------------------------------------

CRD_RESOURCE: Final = GroupResource("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACE_RESOURCE: Final = GroupResource("", "namespaces")

BUILTIN_RESOURCES: Final[tuple[ResourceDef, ...]] = (
    ResourceDef(
        "", "v1", "Namespace", "namespaces", "namespace", ("ns",), namespaced=False, status_subresource=True,
        printer_columns=(PrinterColumn("Status", "string", ".status.phase"), AGE),
        selectable_fields=("status.phase",), status_on_create={"phase": "Active"},
    ),
    ResourceDef(
        "", "v1", "Pod", "pods", "pod", ("po",), status_subresource=True,
        printer_columns=(
            PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn("Status", "string", ".status.phase"),
            PrinterColumn("Restarts", "integer", ".status.containerStatuses[0].restartCount"),
            AGE,
            PrinterColumn("IP", "string", ".status.podIP", priority=1),
            PrinterColumn("Node", "string", ".spec.nodeName", priority=1),
        ),
        selectable_fields=("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName", "status.phase", "status.podIP"),
        categories=("all",), status_on_create={"phase": "Pending"}, returns_deleted_object=True,
    ),
    ResourceDef(
        "", "v1", "Event", "events", "event", ("ev",),
        printer_columns=(
            PrinterColumn("Type", "string", ".type"),
            PrinterColumn("Reason", "string", ".reason"),
            PrinterColumn("Object", "string", ".involvedObject.name"),
            PrinterColumn("Message", "string", ".message"),
            AGE,
        ),
        selectable_fields=(
            "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
            "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
            "reason", "reportingComponent", "source", "type",
        ),
        allow_create_on_update=True,
    ),
    ResourceDef(
        "events.k8s.io", "v1", "Event", "events", "event", ("ev",),
        printer_columns=(
            PrinterColumn("Type", "string", ".type"),
            PrinterColumn("Reason", "string", ".reason"),
            PrinterColumn("Object", "string", ".regarding.name"),
            PrinterColumn("Note", "string", ".note"),
            AGE,
        ),
        selectable_fields=("regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid", "reason", "type", "reportingController"),
        allow_create_on_update=True,
    ),
    ResourceDef(
        "coordination.k8s.io", "v1", "Lease", "leases", "lease",
        printer_columns=(PrinterColumn("Holder", "string", ".spec.holderIdentity"), AGE),
        allow_create_on_update=True,
    ),
    ResourceDef(
        "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions",
        "customresourcedefinition", ("crd", "crds"), namespaced=False, status_subresource=True,
        printer_columns=(PrinterColumn("Created At", "string", ".metadata.creationTimestamp"),),
        categories=("api-extensions",),
    ),
)


# -- CRD <-> ResourceDef -------------------------------------------------------------


def crd_manifest(defs: Sequence[ResourceDef]) -> Obj:
    """One ``CustomResourceDefinition`` serving every version in ``defs`` (same group and plural)."""
    first = defs[0]
    names: Obj = {"kind": first.kind, "listKind": first.list_kind, "plural": first.plural, "singular": first.singular}
    if first.short_names:
        names["shortNames"] = list(first.short_names)
    if first.categories:
        names["categories"] = list(first.categories)
    versions: list[Obj] = []
    for i, d in enumerate(defs):
        version: Obj = {
            "name": d.version,
            "served": True,
            "storage": i == 0,
            "schema": {"openAPIV3Schema": dict(d.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})},
            "additionalPrinterColumns": [
                {k: v for k, v in (("name", c.name), ("type", c.type), ("jsonPath", c.json_path), ("description", c.description), ("priority", c.priority), ("format", c.format)) if v}
                for c in d.printer_columns
            ],
        }
        if d.status_subresource:
            version["subresources"] = {"status": {}}
        if d.selectable_fields:
            version["selectableFields"] = [{"jsonPath": "." + f} for f in d.selectable_fields]
        versions.append(version)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{first.plural}.{first.group}"},
        "spec": {"group": first.group, "names": names, "scope": "Namespaced" if first.namespaced else "Cluster", "versions": versions},
    }


def definitions_from_crd(crd: Obj, *, check_rules: bool = True) -> tuple[ResourceDef, ...]:
    """The served versions of a CRD as :class:`ResourceDef` rows; a malformed CRD is a 422 Invalid.

    ``check_rules`` compiles every CEL rule (a rule that does not parse is refused, as by the server);
    the shipped CRDs skip it at import, so importing the dev cluster stays cheap (tests compile them).
    """
    name = str(crd.get("metadata", {}).get("name", ""))
    spec = crd.get("spec")
    causes: list[tuple[str, str]] = []

    def bad(field_path: str, message: str) -> ApiError:
        return invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, [(field_path, message)])

    if not isinstance(spec, dict):
        raise bad("spec", "Required value")
    group = spec.get("group")
    names = spec.get("names")
    if not isinstance(group, str) or "." not in group:
        raise bad("spec.group", "Invalid value: should be a domain with at least one dot")
    if not isinstance(names, dict) or not isinstance(names.get("plural"), str) or not isinstance(names.get("kind"), str):
        raise bad("spec.names", "Required value: plural and kind")
    plural, kind = str(names["plural"]), str(names["kind"])
    if name != f"{plural}.{group}":
        raise bad("metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group')
    scope = spec.get("scope", "Namespaced")
    if scope not in ("Namespaced", "Cluster"):
        raise bad("spec.scope", 'Unsupported value: supported values: "Cluster", "Namespaced"')
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        raise bad("spec.versions", "Required value: must have exactly one version marked as storage version")
    if sum(1 for v in versions if isinstance(v, dict) and v.get("storage")) != 1:
        causes.append(("spec.versions", "Invalid value: must have exactly one version marked as storage version"))
    out: list[ResourceDef] = []
    for i, v in enumerate(versions):
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            causes.append((f"spec.versions[{i}].name", "Required value"))
            continue
        if not v.get("served", False):
            continue
        columns = tuple(
            PrinterColumn(
                str(c.get("name", "")), str(c.get("type", "string")), str(c.get("jsonPath", "")),
                str(c.get("description", "")), int(c.get("priority", 0)), str(c.get("format", "")),
            )
            for c in v.get("additionalPrinterColumns", None) or []
            if isinstance(c, dict)
        )
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if check_rules:
            causes.extend((f"spec.versions[{i}].schema.openAPIV3Schema{where}", why) for where, why in compile_schema_rules(schema))
        out.append(
            ResourceDef(
                group, v["name"], kind, plural, str(names.get("singular") or kind.lower()),
                tuple(names.get("shortNames") or ()), scope == "Namespaced",
                "status" in (v.get("subresources") or {}),
                columns if "additionalPrinterColumns" in v else (AGE,),
                tuple(str(f.get("jsonPath", "")).lstrip(".") for f in v.get("selectableFields") or [] if isinstance(f, dict)),
                schema if isinstance(schema, dict) else None,
                tuple(names.get("categories") or ()), custom=True, allow_unconditional_update=False,
            )
        )
    if causes:
        raise invalid("CustomResourceDefinition", "apiextensions.k8s.io", name, causes)
    return tuple(out)


KRUNTIMES_RESOURCES: Final[tuple[ResourceDef, ...]] = tuple(d for crd in kruntimes_crds() for d in definitions_from_crd(crd, check_rules=False))
"""The kruntimes kinds as served by default: every served version of the project's own CRDs, schemas included."""


SCHEMALESS: Final[Obj] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def permissive(defs: Iterable[ResourceDef]) -> tuple[ResourceDef, ...]:
    """``defs`` without schemas (every field kept, nothing validated, nothing defaulted), for tests that need
    objects a real CRD would refuse, e.g. to check a client copes with a cluster running an older CRD."""
    return tuple(replace(d, schema=SCHEMALESS) for d in defs)


def crd_status(crd: Obj, now: str) -> Obj:
    """What the apiextensions controller would report once names are accepted: Established."""
    spec = crd["spec"]
    return {
        "acceptedNames": spec["names"],
        "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
        "conditions": [
            {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": now}
            for t, r, m in (
                ("NamesAccepted", "NoConflicts", "no conflicts found"),
                ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            )
        ],
    }


# -- the live table --------------------------------------------------------------------


@final
class ResourceRegistry:
    """The resources served right now. CRDs add and remove rows while requests run, hence the lock.

    ``generation`` moves on every change so discovery/OpenAPI documents can be cached.
    """

    def __init__(self, defs: Iterable[ResourceDef] = BUILTIN_RESOURCES) -> None:
        self._lock = threading.Lock()
        self._by_gvr: dict[tuple[str, str, str], ResourceDef] = {}
        self.generation = 0
        for d in defs:
            self._by_gvr[(d.group, d.version, d.plural)] = d

    def set_custom(self, resource: GroupResource, defs: Sequence[ResourceDef]) -> None:
        """Replace every version served for ``resource`` (from a CRD create/update, or [] on delete)."""
        with self._lock:
            for key in [k for k, d in self._by_gvr.items() if d.resource == resource and d.custom]:
                del self._by_gvr[key]
            for d in defs:
                self._by_gvr[(d.group, d.version, d.plural)] = d
            self.generation += 1

    def lookup(self, group: str, version: str, plural: str) -> ResourceDef | None:
        with self._lock:
            return self._by_gvr.get((group, version, plural))

    def storage(self, resource: GroupResource) -> ResourceDef | None:
        """Any served version of ``resource`` (the first registered), for code that speaks no version."""
        with self._lock:
            for d in self._by_gvr.values():
                if d.resource == resource:
                    return d
        return None

    def all(self) -> tuple[ResourceDef, ...]:
        with self._lock:
            return tuple(self._by_gvr.values())

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions in registration order (the first is preferred)."""
        out: dict[str, list[str]] = {}
        for d in self.all():
            versions = out.setdefault(d.group, [])
            if d.version not in versions:
                versions.append(d.version)
        return out

