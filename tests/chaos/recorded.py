"""The write history of a real kube-apiserver, as the checker reads it, from what fault proxies recorded.

Every client of a real-server epoch (schedulers, creator, monkey, runtime simulator, the setup)
reaches kube-apiserver through a :class:`~tests.controlplane.faultproxy.FaultProxy` that records
each write the server accepted with the object it answered (``record_writes``), lost answers
included. That object's ``resourceVersion`` is the etcd revision of the commit: unique to it and
increasing in commit order, across every resource. The request gives what the dev cluster's history
records beside it: the writer (User-Agent), the verb, the subresource.

Two answers can name one version: a write that changed nothing (an update or patch whose result
equals the stored object) is answered the stored object, and commits nothing. Of the writes naming
one version, the first one sent is the one that committed it: every writer here sends the version
it read as a precondition, or writes a value nobody wrote before it, so a write answered with a
version it did not make was sent after that version committed, after the write that made it. The
others are returned apart, as no-ops.

What an answer does not say, the watches below do. kube-apiserver answers the delete of many
kinds (Leases among them) with a ``Status`` naming the object's UID, not the object at its
deletion's version: the watch's ``DELETED`` event of that UID gives the version and the object.
And one request can commit twice: kube-apiserver deletes a pod (even one no kubelet runs, with no
grace period) by first committing it with ``deletionTimestamp`` set, then deleting it, and
answers the deletion only. A proxy sees one answer; the watches below see both versions, and
:meth:`WatchAudit.complete` puts the first into the history as the delete request's own.

Watches of every written resource, opened before the first recorded write, audit the result
(:class:`WatchAudit`): every version a watch delivers is in the history, with its event type, and
every version in the history of a watched resource was delivered. A write that bypassed the
proxies, or a no-op mistaken for a commit, fails the epoch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kruntimes.kubeclient.kube import Kube, KubeError, WatchStream
from kruntimes.verify import HistoryRecord, Resource
from kruntimes.verify.history import Write
from tests.controlplane.faultproxy import RecordedWrite

_EVENT_TYPES: Final = {"create": "ADDED", "delete": "DELETED"}


def _text(obj: Mapping[str, Any], *path: str) -> str:
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value if isinstance(value, str) else ""


def _event_type(write: RecordedWrite, obj: Mapping[str, Any]) -> str:
    """What a watch reports for this commit. A delete held back by finalizers only marked the object
    (an update); none of this harness's objects has any (the watch audit would tell)."""
    kind = _EVENT_TYPES.get(write.info.verb, "MODIFIED")
    meta = obj.get("metadata")
    return "MODIFIED" if kind == "DELETED" and isinstance(meta, Mapping) and meta.get("finalizers") else kind


def _is_status(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Status" and obj.get("apiVersion") == "v1"


@dataclass(frozen=True, slots=True)
class Recorded:
    history: list[HistoryRecord]
    """The versions the answers name, in commit order."""
    noops: list[RecordedWrite]
    """Writes answered with a version another write made: they committed nothing."""
    status_deletes: list[RecordedWrite]
    """Deletes answered with a ``Status``: their versions are the watches' to tell."""


def commit_history(writes: Iterable[RecordedWrite]) -> Recorded:
    """What the recorded answers say of the commits (see the module docstring)."""
    by_version: dict[int, list[RecordedWrite]] = {}
    status_deletes: list[RecordedWrite] = []
    for write in writes:
        obj = write.object
        assert obj is not None, f"a {write.method} of {write.info} was answered with no JSON object"
        if write.info.verb == "delete" and _is_status(obj):
            status_deletes.append(write)
            continue
        answered = _text(obj, "metadata", "resourceVersion")
        assert write.info.verb in ("create", "update", "patch", "delete"), f"a write the harness never sends: {write.method} {write.info}"
        assert answered.isdigit(), f"a {write.method} answered an object without a resourceVersion: {obj!r:.300}"
        by_version.setdefault(int(answered), []).append(write)
    history: list[HistoryRecord] = []
    noops: list[RecordedWrite] = []
    for version in sorted(by_version):
        first, *rest = sorted(by_version[version], key=lambda w: w.sent)
        obj = first.object
        assert obj is not None
        namespace, name = _text(obj, "metadata", "namespace"), _text(obj, "metadata", "name")
        for other in rest:
            assert other.object is not None
            same = (other.info.group, other.info.resource, _text(other.object, "metadata", "namespace"), _text(other.object, "metadata", "name"))
            assert same == (first.info.group, first.info.resource, namespace, name), f"two objects answered at resourceVersion {version}"
        noops.extend(rest)
        history.append(HistoryRecord(
            resource_version=version, event_type=_event_type(first, obj), verb=first.info.verb,
            resource=Resource(first.info.group, first.info.resource), subresource=first.info.subresource,
            namespace=namespace, name=name, object=obj, user_agent=first.info.user_agent, time=first.time,
        ))
    return Recorded(history, noops, status_deletes)


def _managers(obj: Mapping[str, Any]) -> str:
    """Who the server says wrote the object last (managedFields), and whether it is being deleted."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    fields = meta.get("managedFields")
    entries = [f"{f.get('manager')}/{f.get('operation')}/{f.get('subresource', '')}@{f.get('time')}" for f in fields if isinstance(f, Mapping)] if isinstance(fields, list) else []
    return f"managers={entries} deletionTimestamp={meta.get('deletionTimestamp')}"


@dataclass(frozen=True, slots=True)
class Watched:
    """One collection watched for the audit: ``path`` of ``resource``, cluster-wide or ``namespace``'s."""

    resource: Resource
    path: str
    namespace: str = ""


Version = tuple[str, str, str, str, int]
"""(group, plural, namespace, name, resourceVersion) of one committed version."""


class WatchAudit:
    """Watches of the written collections from one resourceVersion on, to check a history against."""

    def __init__(self, kube: Kube, collections: Iterable[Watched], resource_version: str) -> None:
        self._kube = kube
        self._lock = threading.Lock()
        self.seen: dict[Version, str] = {}
        """Every version delivered, with its event type."""
        self.objects: dict[Version, Mapping[str, Any]] = {}
        self._newest: dict[Resource, int] = {}
        self.errors: list[str] = []
        self._streams: list[WatchStream] = []
        self._threads: list[threading.Thread] = []
        chosen = list(collections)
        self._collections = chosen
        self._watched = {watched.resource for watched in chosen}
        for watched in chosen:
            stream = kube.watch(watched.path, resource_version, timeout_seconds=1800, bookmarks=False)
            self._streams.append(stream)
            thread = threading.Thread(target=self._read, args=(watched.resource, stream), name=f"audit-{watched.resource.plural}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _read(self, resource: Resource, stream: WatchStream) -> None:
        try:
            for event in stream:
                meta = event.object.get("metadata") if isinstance(event.object, Mapping) else None
                if not isinstance(meta, Mapping) or event.type not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                version = int(str(meta.get("resourceVersion")))
                key = (resource.group, resource.plural, str(meta.get("namespace") or ""), str(meta.get("name")), version)
                with self._lock:
                    self.seen[key] = event.type
                    self.objects[key] = event.object
                    self._newest[resource] = max(self._newest.get(resource, 0), version)
        except KubeError as problem:
            with self._lock:
                self.errors.append(f"{resource.plural}: {problem}")

    def _reached(self, wanted: Mapping[Resource, int]) -> bool:
        with self._lock:
            return all(self._newest.get(resource, 0) >= version for resource, version in wanted.items())

    def _deleted(self, write: RecordedWrite) -> tuple[Version, Mapping[str, Any]] | None:
        """The watched deletion of the object a ``Status``-answered delete names (by UID)."""
        assert write.object is not None
        details = write.object.get("details")
        uid = details.get("uid") if isinstance(details, Mapping) else None
        info = write.info
        with self._lock:
            for version, kind in self.seen.items():
                if kind == "DELETED" and version[:4] == (info.group, info.resource, info.namespace, info.name):
                    obj = self.objects[version]
                    if _text(obj, "metadata", "uid") == uid:
                        return version, obj
        return None

    def complete(self, recorded: Recorded, timeout: float = 30.0) -> list[HistoryRecord]:
        """The whole history: the answers' versions, each ``Status``-answered delete at its watched
        version, and the first commit of each recorded delete that committed twice (a watched version
        marked for deletion, followed by a recorded delete of the same object and by nothing else
        of it). Waits (``timeout`` at most) until each watch has delivered what it must."""
        wanted: dict[Resource, int] = {}
        for record in recorded.history:
            resource = Resource(record.resource.group, record.resource.plural)
            if resource in self._watched:
                wanted[resource] = max(wanted.get(resource, 0), record.resource_version)
        deadline = time.monotonic() + timeout
        while not self._reached(wanted) and time.monotonic() < deadline:
            time.sleep(0.1)
        history = list(recorded.history)
        for write in recorded.status_deletes:
            found = self._deleted(write)
            while found is None and time.monotonic() < deadline:
                time.sleep(0.1)
                found = self._deleted(write)
            assert found is not None, f"no watch saw the deletion a Status answered: {write.info} {write.object}"
            version, obj = found
            history.append(HistoryRecord(
                resource_version=version[4], event_type="DELETED", verb="delete", resource=Resource(write.info.group, write.info.resource),
                subresource=write.info.subresource, namespace=write.info.namespace, name=write.info.name, object=obj,
                user_agent=write.info.user_agent, time=write.time,
            ))
        with self._lock:
            objects = dict(self.objects)
        recorded_versions = {(r.resource.group, r.resource.plural, r.namespace, r.name, r.resource_version) for r in history}
        by_object: dict[tuple[str, str, str, str], list[HistoryRecord]] = {}
        for record in history:
            by_object.setdefault((record.resource.group, record.resource.plural, record.namespace, record.name), []).append(record)
        steps: list[HistoryRecord] = []
        for version, obj in objects.items():
            meta = obj.get("metadata")
            if version in recorded_versions or not isinstance(meta, Mapping) or not meta.get("deletionTimestamp"):
                continue
            later = [r for r in by_object.get(version[:4], []) if r.resource_version > version[4]]
            then = min(later, key=lambda r: r.resource_version, default=None)
            if then is None or then.verb != "delete" or then.event_type != "DELETED":
                continue
            steps.append(HistoryRecord(
                resource_version=version[4], event_type="MODIFIED", verb="delete", resource=then.resource, subresource=then.subresource,
                namespace=then.namespace, name=then.name, object=obj, user_agent=then.user_agent, time=then.time,
            ))
        return sorted(history + steps, key=lambda r: r.resource_version)

    def differences(self, history: Iterable[Write]) -> list[str]:
        """What the history disagrees on, for the watched resources (empty: nothing), with the
        watches (every version) and with the server's objects now (each object's last version: a
        watch may not have delivered a write made after the history's newest version of its
        resource). Call once every writer has stopped, after :meth:`complete`, which waits for the watches."""
        mine: dict[Version, str] = {}
        last: dict[tuple[str, str, str, str], int | None] = {}
        for record in history:
            resource = Resource(record.resource.group, record.resource.plural)
            if resource in self._watched:
                mine[(resource.group, resource.plural, record.namespace, record.name, record.resource_version)] = record.event_type
                last[(resource.group, resource.plural, record.namespace, record.name)] = None if record.event_type == "DELETED" else record.resource_version
        with self._lock:
            seen = dict(self.seen)
            errors = list(self.errors)
        found = [f"watch failed: {error}" for error in errors]
        found += [f"watched, not recorded (a write past the proxies): {v} {t} {_managers(self.objects[v])}"
                  for v, t in sorted(seen.items(), key=lambda i: i[0][4]) if v not in mine]
        found += [f"recorded, never watched: {v} {t}" for v, t in sorted(mine.items(), key=lambda i: i[0][4]) if v not in seen]
        found += [f"recorded as {t}, watched as {seen[v]}: {v}" for v, t in sorted(mine.items(), key=lambda i: i[0][4]) if v in seen and seen[v] != t]
        for watched in self._collections:
            items, _ = self._kube.list(watched.path).unwrap()
            now: dict[tuple[str, str, str, str], int | None] = {}
            for item in items:
                meta = item.get("metadata")
                assert isinstance(meta, Mapping)
                now[(watched.resource.group, watched.resource.plural, str(meta.get("namespace") or ""), str(meta.get("name")))] = int(str(meta.get("resourceVersion")))
            expected = {key: version for key, version in last.items()
                        if key[:2] == (watched.resource.group, watched.resource.plural) and (not watched.namespace or key[2] == watched.namespace)}
            for key in sorted(set(now) | set(expected)):
                if now.get(key) != expected.get(key) and (key in now or expected.get(key) is not None):
                    found.append(f"{key} is at version {now.get(key)} on the server, {expected.get(key)} in the history (a write past the proxies)")
        return found

    def stop(self) -> None:
        for stream in self._streams:
            stream.interrupt()
        for thread in self._threads:
            thread.join(10)
