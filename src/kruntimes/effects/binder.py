"""Status writes: bind, wait and terminal documents go through ``PATCH runs/<name>/status``.

The body is ``kruntimes.pure.status.patch_body(...)``: a JSON merge patch
(``application/merge-patch+json``) that carries the resourceVersion the cycle
observed, so a concurrent writer makes the API server answer ``409 Conflict``
instead of losing an update (SPEC §6). The outcome is a closed set the worker
acts on:

- ``Success(Written)``: the new resourceVersion and the object as stored.
- ``conflict``   (409): someone else wrote first; release the reservation, count
  a ``bind`` conflict, requeue at once (the informer brings the newer Run).
- ``not_found``  (404): the Run is gone; release and forget the key.
- ``retriable``  (429, 5xx, timeouts, no answer): release, requeue with back-off
  (at least ``retry_after`` when the server gave one).
- ``permanent``  (400/422 invalid, 401, 403, other 4xx): repeating the same write
  will not help; release, log loudly, requeue with back-off so a fixed RBAC or
  CRD lets the Run through later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias, final

from returns.result import Failure, Result, Success

from kruntimes.effects.kube import MERGE_PATCH, RUNS, ApiError, JSONObject, resource_version_of
from kruntimes.pure.model.objects import Run
from kruntimes.pure.status import StatusPatch, patch_body

WriteFailureKind: TypeAlias = Literal["conflict", "not_found", "retriable", "permanent"]


class StatusPatcher(Protocol):
    """What the binder needs from ``kube.Kube``."""

    def patch_status(
        self, path: str, body: str | bytes, content_type: str = MERGE_PATCH
    ) -> Result[JSONObject, ApiError]: ...


@final
@dataclass(frozen=True, slots=True)
class Written:
    resource_version: str
    """The Run's resourceVersion after the write (for ``status.applied``)."""
    object: JSONObject


@final
@dataclass(frozen=True, slots=True)
class WriteFailure:
    kind: WriteFailureKind
    error: ApiError

    @property
    def retry_after(self) -> float | None:
        return self.error.retry_after

    def __str__(self) -> str:
        return f"{self.kind}: {self.error}"


def classify(error: ApiError) -> WriteFailureKind:
    if error.kind == "conflict":
        return "conflict"
    if error.kind == "not_found":
        return "not_found"
    if error.retriable:
        return "retriable"
    return "permanent"


@final
class Binder:
    """Writes Run status documents through the ``status`` subresource."""

    def __init__(self, kube: StatusPatcher) -> None:
        self._kube = kube

    def write(self, run: Run, patch: StatusPatch) -> Result[Written, WriteFailure]:
        """Write ``patch`` for ``run``, guarded by the resourceVersion the cycle observed."""
        return self.write_body(run.namespace, run.name, patch_body(patch, run.resource_version))

    def write_body(self, namespace: str, name: str, body: str) -> Result[Written, WriteFailure]:
        """Send a ready merge-patch body (it must carry ``metadata.resourceVersion``)."""
        result = self._kube.patch_status(RUNS.path(namespace, name), body, MERGE_PATCH)
        stored = result.value_or(None)
        if stored is None:
            error = result.failure()
            return Failure(WriteFailure(classify(error), error))
        return Success(Written(resource_version_of(stored), stored))
