"""The verbs with the API server's semantics, above the store and below HTTP.

This is where Kubernetes behaviour lives: system metadata (uid,
creationTimestamp, generation), ``generateName``, optimistic concurrency on
``metadata.resourceVersion``, status-subresource isolation, finalizers and
``deletionTimestamp``, custom-resource schemas, namespace lifecycle and CRD
registration. HTTP handlers and the runtime simulator both call it, so a
simulator write is indistinguishable from a client's (same history, same
watch events).

Namespaces: creating an object in a namespace that does not exist is a 404,
as on a real cluster, unless ``auto_create_namespaces`` is set.
"""

from __future__ import annotations

import base64
import json
import random
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, final

from kruntimes.devcluster import errors
from kruntimes.devcluster.errors import ApiError
from kruntimes.devcluster.patches import apply_patch
from kruntimes.devcluster.resources import (
    CRD_RESOURCE,
    NAMESPACE_RESOURCE,
    ResourceDef,
    ResourceRegistry,
    crd_status,
    definitions_from_crd,
)
from kruntimes.devcluster.schema import apply_schema
from kruntimes.devcluster.selectors import Selection
from kruntimes.devcluster.store import Decision, Keep, Put, Remove, Store, Subscription, WriteContext
from kruntimes.devcluster.times import rfc3339
from kruntimes.devcluster.types import GroupResource, ObjectKey, Obj, json_copy

_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUFFIX_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_SYSTEM_META: Final = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")
_DROPPED_META: Final = ("selfLink", "managedFields")
_INTERNAL: Final = WriteContext("delete", user_agent="kruntimes-devcluster/lifecycle-controller")
FRESHNESS_WAIT: Final = 3.0
"""Seconds a read from a resourceVersion the store has not reached waits for it (kube-apiserver's
watch cache ``blockTimeout``)."""
MAX_VERSION_DIGITS: Final = 20
"""A resourceVersion is a uint64 here as in etcd: longer strings are refused before converting."""


@final
@dataclass(slots=True)
class WriteOptions:
    """Per-request knobs of a write (query parameters), and the warnings it produced."""

    dry_run: bool = False
    field_validation: str = ""
    warnings: list[str] = field(default_factory=list)


@final
class ObjectService:
    """The Kubernetes verbs over a :class:`Store`, for one :class:`ResourceRegistry`.

    Objects it returns are the stored ones (no copy per read, which keeps the
    server cheap): callers read them and build new dicts to write.
    """

    def __init__(
        self,
        store: Store,
        registry: ResourceRegistry,
        *,
        auto_create_namespaces: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.registry = registry
        self.auto_create_namespaces = auto_create_namespaces
        self._clock = clock
        self._names = random.Random()

    # -- helpers ----------------------------------------------------------------------

    def now(self) -> str:
        return rfc3339(self._clock())

    @staticmethod
    def _key(rd: ResourceDef, namespace: str, name: str) -> ObjectKey:
        return ObjectKey(namespace if rd.namespaced else "", name)

    def _decode(self, rd: ResourceDef, body: Any, namespace: str) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        obj = json_copy(body)
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version not in (None, "", rd.api_version) or kind not in (None, "", rd.kind):
            raise errors.bad_request(f"the API version in the data ({api_version}) does not match the expected API version ({rd.api_version}) or kind ({kind} != {rd.kind})")
        obj["apiVersion"], obj["kind"] = rd.api_version, rd.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rd.namespaced:
            given = meta.get("namespace") or namespace
            if namespace and given != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = given
        else:
            meta.pop("namespace", None)
        for k in _DROPPED_META:
            meta.pop(k, None)
        return obj

    def _validate_meta(self, rd: ResourceDef, meta: Obj) -> None:
        name = str(meta.get("name", ""))
        causes: list[tuple[str, str]] = []
        pattern = _DNS_LABEL if rd.resource == NAMESPACE_RESOURCE else _DNS_SUBDOMAIN
        if not pattern.match(name) or len(name) > 253:
            causes.append(("metadata.name", f"Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"))
        for field_name in ("labels", "annotations"):
            value = meta.get(field_name)
            if value is not None and (not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())):
                causes.append((f"metadata.{field_name}", "Invalid value: must be a map of string to string"))
        finalizers = meta.get("finalizers")
        if finalizers is not None and (not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)):
            causes.append(("metadata.finalizers", "Invalid value: must be a list of strings"))
        if causes:
            raise errors.invalid(rd.kind, rd.group, name, causes)

    def _apply_schema(self, rd: ResourceDef, obj: Obj, old: Obj | None, options: WriteOptions) -> Obj:
        if not rd.custom or rd.schema is None:
            return obj
        report = apply_schema(rd.schema, obj, old)
        name = str(obj["metadata"].get("name") or obj["metadata"].get("generateName", ""))
        if report.unknown:
            if options.field_validation == "Strict":
                fields = ", ".join(f'unknown field "{u}"' for u in report.unknown)
                raise errors.bad_request(f'{rd.kind} in version "{rd.version}" cannot be handled as a {rd.kind}: strict decoding error: {fields}')
            if options.field_validation in ("Warn", ""):
                options.warnings.extend(f'unknown field "{u}"' for u in report.unknown)
        if report.errors:
            raise errors.invalid(rd.kind, rd.group, name, report.errors)
        pruned: Obj = report.value
        return pruned

    def _require_namespace(self, rd: ResourceDef, namespace: str) -> None:
        if not rd.namespaced:
            return
        ns = self.store.read(NAMESPACE_RESOURCE, ObjectKey("", namespace))
        if ns is None:
            if not self.auto_create_namespaces:
                raise errors.not_found("", "namespaces", namespace)
            self.ensure_namespace(namespace)
        elif ns["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(f"unable to create new content in namespace {namespace} because it is being terminated")

    def ensure_namespace(self, name: str) -> None:
        """Create namespace ``name`` if missing (used for startup namespaces and auto-creation)."""
        rd = self.registry.storage(NAMESPACE_RESOURCE)
        assert rd is not None
        try:
            self.create(rd, "", {"metadata": {"name": name}}, WriteContext("create", user_agent="kruntimes-devcluster"))
        except ApiError as exc:
            if exc.reason != "AlreadyExists":
                raise

    def _present(self, rd: ResourceDef, obj: Obj) -> Obj:
        """The object as served at ``rd``'s version (custom kinds with several versions share storage)."""
        if obj.get("apiVersion") == rd.api_version:
            return obj
        return {**obj, "apiVersion": rd.api_version}

    # -- reads --------------------------------------------------------------------------

    def get(self, rd: ResourceDef, namespace: str, name: str) -> Obj:
        obj = self.store.read(rd.resource, self._key(rd, namespace, name))
        if obj is None:
            raise errors.not_found(rd.group, rd.plural, name)
        return self._present(rd, obj)

    def list(self, rd: ResourceDef, namespace: str | None, selection: Selection = Selection(), *, limit: int = 0, continue_token: str = "", resource_version: str = "") -> Obj:
        """A ``<Kind>List``. Pages after the first show the current state after the continue key,
        labelled with the first page's resourceVersion (watching from it misses nothing).
        ``resource_version`` (a first page's): the list must be at least that new; one the store has
        not reached within :data:`FRESHNESS_WAIT` is a 504, as kube-apiserver answers."""
        if resource_version not in ("", "0") and not continue_token:
            self._wait_fresh(self._version(resource_version))
        start: tuple[str, str] | None = None
        token_rv: int | None = None
        if continue_token:
            try:
                token = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                token_rv, start = int(token["rv"]), (str(token["start"][0]), str(token["start"][1]))
            except (ValueError, KeyError, TypeError, IndexError, OverflowError):  # OverflowError: an "rv" of Infinity
                raise errors.bad_request("continue key is not valid") from None
        objs, rv = self.store.list_objects(rd.resource, namespace if rd.namespaced else None, after=start)
        if token_rv is not None:
            rv = token_rv
        items: list[Obj] = []
        more = False
        for obj in objs:
            if not selection.matches(obj):
                continue
            if limit and len(items) >= limit:
                more = True
                break
            items.append(self._present(rd, obj))
        metadata: Obj = {"resourceVersion": str(rv)}
        if more:
            last = items[-1]["metadata"]
            raw = json.dumps({"rv": rv, "start": [last.get("namespace", ""), last["name"]]}).encode()
            metadata["continue"] = base64.urlsafe_b64encode(raw).decode()
        return {"apiVersion": rd.api_version, "kind": rd.list_kind, "metadata": metadata, "items": items}

    def watch(self, rd: ResourceDef, namespace: str | None, selection: Selection, resource_version: str, *, send_initial_events: bool = False) -> Subscription:
        """Watch semantics of ``resourceVersion``: "" or "0" start with the current state as ADDED; N resumes after N.

        ``send_initial_events`` (the streaming-list protocol) always starts with the current state and
        ends it with a bookmark annotated ``k8s.io/initial-events-end``.
        """
        ns = namespace if rd.namespaced else None
        matcher = None if selection == Selection() else selection.matches
        if send_initial_events or resource_version in ("", "0"):
            if send_initial_events and resource_version not in ("", "0"):
                self._wait_fresh(self._version(resource_version))
            return self.store.subscribe([rd.resource], namespace=ns, matcher=matcher, initial_events=True, initial_events_end=send_initial_events)
        return self.store.subscribe([rd.resource], namespace=ns, matcher=matcher, since=self._version(resource_version))

    @staticmethod
    def _version(resource_version: str) -> int:
        if not (0 < len(resource_version) <= MAX_VERSION_DIGITS and resource_version.isascii() and resource_version.isdigit()):
            raise errors.bad_request(f"invalid resource version: {resource_version[:MAX_VERSION_DIGITS + 1]!r}")
        return int(resource_version)

    def _wait_fresh(self, resource_version: int) -> None:
        """Wait for the store to reach ``resource_version`` (kube-apiserver's watch cache waits 3 s), else 504."""
        current = self.store.wait_for_version(resource_version, FRESHNESS_WAIT)
        if current < resource_version:
            raise errors.too_large_resource_version(resource_version, current)

    # -- create -------------------------------------------------------------------------

    def create(self, rd: ResourceDef, namespace: str, body: Any, context: WriteContext, options: WriteOptions | None = None) -> Obj:
        options = options or WriteOptions()
        obj = self._decode(rd, body, namespace)
        meta = obj["metadata"]
        generate = not meta.get("name") and meta.get("generateName")
        if not meta.get("name") and not generate:
            raise errors.invalid(rd.kind, rd.group, "", [("metadata.name", "Required value: name or generateName is required")])
        if rd.namespaced and not meta.get("namespace"):
            raise errors.bad_request("the server could not find the requested resource: namespace is required")
        self._require_namespace(rd, str(meta.get("namespace", "")))
        if rd.status_subresource:
            if rd.status_on_create is not None:
                obj["status"] = json_copy(dict(rd.status_on_create))
            else:
                obj.pop("status", None)
        obj = self._apply_schema(rd, obj, None, options)
        meta = obj["metadata"]
        for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        meta["generation"] = 1
        defs: tuple[ResourceDef, ...] = ()
        if rd.resource == CRD_RESOURCE:
            defs = definitions_from_crd(obj)
            obj["status"] = crd_status(obj, meta["creationTimestamp"])
        for attempt in range(8):
            if generate:
                meta["name"] = str(meta["generateName"]) + "".join(self._names.choice(_SUFFIX_ALPHABET) for _ in range(5))
            self._validate_meta(rd, meta)
            key = self._key(rd, str(meta.get("namespace", "")), str(meta["name"]))

            def decide(current: Obj | None, candidate: Obj = obj) -> Decision:
                if current is not None:
                    raise errors.already_exists(rd.group, rd.plural, str(candidate["metadata"]["name"]))
                return Put(json_copy(candidate))

            try:
                stored, _ = self.store.transact(rd.resource, key, decide, context, dry_run=options.dry_run)
            except ApiError as exc:
                if generate and exc.reason == "AlreadyExists" and attempt < 7:
                    continue
                raise
            assert stored is not None
            if defs and not options.dry_run:
                self.registry.set_custom(GroupResource(defs[0].group, defs[0].plural), defs)
            return self._present(rd, stored)
        raise errors.internal_error("could not generate a unique name")  # pragma: no cover - loop always returns or raises

    # -- update / patch -----------------------------------------------------------------

    def _spec_part(self, rd: ResourceDef, obj: Obj) -> Obj:
        """Everything whose change bumps ``generation``: all but metadata (and status when it is a subresource)."""
        skip = {"metadata", "apiVersion", "kind"} | ({"status"} if rd.status_subresource else set())
        return {k: v for k, v in obj.items() if k not in skip}

    def _next_version(self, rd: ResourceDef, current: Obj, incoming: Obj, subresource: str, options: WriteOptions) -> Decision:
        """Turn a client's full object into the stored successor of ``current`` (shared by PUT and PATCH)."""
        cur_meta = current["metadata"]
        if subresource == "status":
            # the stored status is replaced (or dropped) just below: not worth copying first
            new = {key: value if key == "status" else json_copy(value) for key, value in current.items()}
            if "status" in incoming:
                new["status"] = json_copy(incoming["status"])
            else:
                new.pop("status", None)
        else:
            new = json_copy(incoming)
            new["apiVersion"], new["kind"] = current["apiVersion"], current["kind"]
            meta = new.setdefault("metadata", {})
            if not isinstance(meta, dict):
                raise errors.bad_request("metadata must be an object")
            for k in _DROPPED_META:
                meta.pop(k, None)
            for k in ("name", "namespace", *_SYSTEM_META):
                if k in cur_meta:
                    meta[k] = cur_meta[k]
                else:
                    meta.pop(k, None)
            if rd.status_subresource:
                if "status" in current:
                    new["status"] = json_copy(current["status"])
                else:
                    new.pop("status", None)
            self._validate_meta(rd, meta)
            if cur_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(cur_meta.get("finalizers") or [])
                if added:
                    raise errors.invalid(rd.kind, rd.group, str(cur_meta["name"]), [("metadata.finalizers", "Forbidden: no new finalizers can be added if the object is being deleted")])
        new = self._apply_schema(rd, new, current, options)
        meta = new["metadata"]
        meta["resourceVersion"] = cur_meta.get("resourceVersion")
        if self._spec_part(rd, new) != self._spec_part(rd, current):
            meta["generation"] = int(cur_meta.get("generation", 1)) + 1
        if rd.resource == CRD_RESOURCE and subresource != "status":
            definitions_from_crd(new)
            new["status"] = crd_status(new, self.now())
            if "status" in current:
                new["status"]["conditions"] = current["status"].get("conditions", new["status"]["conditions"])
        if new == current:
            return Keep()
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return Remove()
        return Put(new)

    def _precompute(self, rd: ResourceDef, key: ObjectKey, successor: Callable[[Obj], Decision], options: WriteOptions) -> Callable[[Obj], Decision]:
        """``successor`` for the object as it is now, computed outside the store's lock.

        Schema work (pruning, defaulting, validation, CEL) takes milliseconds; inside the transaction it
        would hold up every other request. The returned function reuses the precomputed outcome when the
        object in the transaction is still that version, and computes it afresh when a write came between.
        """
        if not rd.custom or rd.schema is None:
            return successor
        snapshot = self.store.read(rd.resource, key)
        if snapshot is None:
            return successor
        warnings_before = len(options.warnings)
        try:
            decision: Decision | ApiError = successor(snapshot)
        except ApiError as exc:
            decision = exc
        version = snapshot["metadata"].get("resourceVersion")

        def decide(current: Obj) -> Decision:
            if current is snapshot or current["metadata"].get("resourceVersion") == version:
                if isinstance(decision, ApiError):
                    raise decision
                return decision
            del options.warnings[warnings_before:]  # computed again below, for the version that won
            return successor(current)

        return decide

    def _check_precondition(self, rd: ResourceDef, current: Obj, incoming_rv: object, *, required: bool) -> None:
        if incoming_rv in (None, ""):
            if required:
                raise errors.invalid(rd.kind, rd.group, str(current["metadata"]["name"]), [("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")])
            return
        if str(incoming_rv) != current["metadata"].get("resourceVersion"):
            raise errors.conflict(rd.group, rd.plural, str(current["metadata"]["name"]))

    def update(self, rd: ResourceDef, namespace: str, name: str, body: Any, context: WriteContext, options: WriteOptions | None = None) -> Obj:
        """PUT of the object or of its ``status`` (``context.subresource``)."""
        options = options or WriteOptions()
        obj = self._decode(rd, body, namespace)
        body_name = obj["metadata"].get("name")
        if body_name and body_name != name:
            raise errors.bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        obj["metadata"]["name"] = name
        subresource = context.subresource
        created: list[bool] = []

        def successor(current: Obj) -> Decision:
            self._check_precondition(rd, current, obj["metadata"].get("resourceVersion"), required=not rd.allow_unconditional_update)
            return self._next_version(rd, current, obj, subresource, options)

        key = self._key(rd, namespace, name)
        early = self._precompute(rd, key, successor, options)

        def decide(current: Obj | None) -> Decision:
            if current is None:
                if subresource or not rd.allow_create_on_update:
                    raise errors.not_found(rd.group, rd.plural, name)
                created.append(True)
                return Keep()
            return early(current)

        stored, _ = self.store.transact(rd.resource, key, decide, context, dry_run=options.dry_run)
        if created:
            obj["metadata"].pop("resourceVersion", None)
            return self.create(rd, namespace, obj, context, options)
        assert stored is not None
        self._after_change(rd, stored, context)
        return self._present(rd, stored)

    def patch(self, rd: ResourceDef, namespace: str, name: str, content_type: str, patch: Any, context: WriteContext, options: WriteOptions | None = None) -> Obj:
        """PATCH (merge, JSON patch, strategic for built-ins) of the object or its ``status``."""
        options = options or WriteOptions()
        subresource = context.subresource

        def successor(current: Obj) -> Decision:
            patched = apply_patch(content_type, current, patch, custom=rd.custom)
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata", {}), dict):
                raise errors.bad_request("the patch produced something that is not an object")
            meta = patched.get("metadata", {})
            for k in ("name", "namespace"):
                if meta.get(k, current["metadata"].get(k)) != current["metadata"].get(k):
                    raise errors.bad_request(f"metadata.{k} of the object cannot be changed by a patch")
            self._check_precondition(rd, current, meta.get("resourceVersion"), required=False)
            return self._next_version(rd, current, patched, subresource, options)

        key = self._key(rd, namespace, name)
        early = self._precompute(rd, key, successor, options)

        def decide(current: Obj | None) -> Decision:
            if current is None:
                raise errors.not_found(rd.group, rd.plural, name)
            return early(current)

        stored, _ = self.store.transact(rd.resource, key, decide, context, dry_run=options.dry_run)
        assert stored is not None
        self._after_change(rd, stored, context)
        return self._present(rd, stored)

    # -- delete -------------------------------------------------------------------------

    def delete(self, rd: ResourceDef, namespace: str, name: str, context: WriteContext, *, preconditions: Obj | None = None, dry_run: bool = False) -> tuple[Obj, bool]:
        """Delete, or with finalizers only mark ``deletionTimestamp``. Returns (object, gone now)."""
        def decide(current: Obj | None) -> Decision:
            if current is None:
                raise errors.not_found(rd.group, rd.plural, name)
            meta = current["metadata"]
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise errors.conflict(rd.group, rd.plural, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
                raise errors.conflict(rd.group, rd.plural, name, f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, ResourceVersion in object meta: {meta.get('resourceVersion')}")
            if meta.get("finalizers") or rd.resource == NAMESPACE_RESOURCE:
                if meta.get("deletionTimestamp"):
                    return Keep()
                new = json_copy(current)
                new["metadata"]["deletionTimestamp"] = self.now()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["generation"] = int(meta.get("generation", 1)) + 1
                if rd.resource == NAMESPACE_RESOURCE:
                    new["status"] = {"phase": "Terminating"}
                return Put(new)
            return Remove()

        stored, kind = self.store.transact(rd.resource, self._key(rd, namespace, name), decide, context, dry_run=dry_run)
        assert stored is not None
        if not dry_run:
            self._after_change(rd, stored, context, deleted=kind == "DELETED")
            if rd.resource == NAMESPACE_RESOURCE and kind == "MODIFIED":
                self._empty_namespace(name)
        return self._present(rd, stored), kind == "DELETED"

    def delete_collection(self, rd: ResourceDef, namespace: str | None, selection: Selection, context: WriteContext, *, dry_run: bool = False) -> Obj:
        listed = self.list(rd, namespace, selection)
        deleted: list[Obj] = []
        for item in listed["items"]:
            meta = item["metadata"]
            try:
                obj, _ = self.delete(rd, str(meta.get("namespace", "")), str(meta["name"]), context, dry_run=dry_run)
            except ApiError as exc:
                if exc.reason != "NotFound":
                    raise
                continue
            deleted.append(obj)
        return {**listed, "items": deleted}

    # -- lifecycles that follow a change ------------------------------------------------

    def _after_change(self, rd: ResourceDef, obj: Obj, context: WriteContext, *, deleted: bool = False) -> None:
        meta = obj["metadata"]
        if rd.resource == CRD_RESOURCE:
            if deleted:
                self._remove_custom_resource(obj)
            elif context.subresource != "status":
                resource = GroupResource(str(obj["spec"]["group"]), str(obj["spec"]["names"]["plural"]))
                self.registry.set_custom(resource, definitions_from_crd(obj))
        if rd.namespaced and meta.get("namespace") and deleted:
            self._finish_namespace(str(meta["namespace"]))

    def _remove_custom_resource(self, crd: Obj) -> None:
        resource = GroupResource(str(crd["spec"]["group"]), str(crd["spec"]["names"]["plural"]))
        objs, _ = self.store.list_objects(resource)
        for obj in objs:
            key = ObjectKey(str(obj["metadata"].get("namespace", "")), str(obj["metadata"]["name"]))
            self.store.transact(resource, key, lambda cur: Remove() if cur is not None else Keep(), _INTERNAL)
        self.registry.set_custom(resource, ())

    def _empty_namespace(self, namespace: str) -> None:
        for rd in self.registry.all():
            if not rd.namespaced or self.registry.storage(rd.resource) is not rd:
                continue
            objs, _ = self.store.list_objects(rd.resource, namespace)
            for obj in objs:
                try:
                    self.delete(rd, namespace, str(obj["metadata"]["name"]), _INTERNAL)
                except ApiError:
                    continue
        self._finish_namespace(namespace)

    def _finish_namespace(self, namespace: str) -> None:
        ns = self.store.read(NAMESPACE_RESOURCE, ObjectKey("", namespace))
        if ns is None or not ns["metadata"].get("deletionTimestamp") or self.store.namespaces_in_use(namespace):
            return
        self.store.transact(NAMESPACE_RESOURCE, ObjectKey("", namespace), lambda cur: Remove() if cur is not None else Keep(), _INTERNAL)
