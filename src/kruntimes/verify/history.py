"""The write history the checker reads, as a structural type.

The dev server's ``cluster.history()`` returns ``WriteRecord`` values; its
loopback admin endpoint ``GET /_devcluster/history`` returns the same records
as JSON. The checker accepts anything shaped like :class:`Write`, so it needs
no import of the dev server, and :func:`records_from_json` turns the JSON form
into :class:`HistoryRecord` values for out-of-process use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class ResourceLike(Protocol):
    @property
    def group(self) -> str: ...
    @property
    def plural(self) -> str: ...


class Write(Protocol):
    """One committed object version and the request that made it."""

    @property
    def resource_version(self) -> int: ...
    @property
    def event_type(self) -> str: ...
    @property
    def verb(self) -> str: ...
    @property
    def resource(self) -> ResourceLike: ...
    @property
    def subresource(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def object(self) -> Mapping[str, Any]: ...
    @property
    def user_agent(self) -> str: ...
    @property
    def time(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    plural: str


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """A :class:`Write` built by hand (unit tests) or from the admin endpoint's JSON."""

    resource_version: int
    event_type: str
    verb: str
    resource: Resource
    subresource: str
    namespace: str
    name: str
    object: Mapping[str, Any]
    user_agent: str
    time: float = 0.0
    request_id: str = field(default="")


def records_from_json(items: Iterable[Mapping[str, Any]]) -> list[HistoryRecord]:
    """The ``items`` of ``GET /_devcluster/history`` as records, in the order given."""
    return [
        HistoryRecord(
            resource_version=int(item["resourceVersion"]),
            event_type=str(item["type"]),
            verb=str(item["verb"]),
            resource=Resource(str(item.get("group", "")), str(item["resource"])),
            subresource=str(item.get("subresource", "")),
            namespace=str(item.get("namespace", "")),
            name=str(item.get("name", "")),
            object=item.get("object") or {},
            user_agent=str(item.get("userAgent", "")),
            time=float(item.get("time", 0.0)),
            request_id=str(item.get("requestId", "")),
        )
        for item in items
    ]
