"""Status writes and the one read that settles an ambiguous bind, through the API server.

The body is ``kruntimes.pure.status.patch_body(...)``: a JSON merge patch
(``application/merge-patch+json``) on the ``status`` subresource that carries
the resourceVersion the cycle observed, so a concurrent writer makes the API
server answer ``409 Conflict`` instead of losing an update (SPEC §6). Every
answer is sorted into the closed set the pure step settles
(``kruntimes.pure.step.WriteOutcome``):

- 2xx → ``Written``;
- 409 → ``Conflict``; 404 → ``Gone``;
- any other 4xx (429 included), or a request that never left (the connection
  could not be made) → ``Refused``: the server did not apply it;
- a 5xx, a timeout, a connection lost after the request was sent, or a 2xx
  whose body is not the object → ``Ambiguous``: the write may have landed.
  Its ``deadline`` is when the write can no longer land (``hold`` seconds
  after it was sent: kube-apiserver gives up on a request after its own
  request timeout, one minute by default).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final, Protocol, final

from returns.result import Result

from kruntimes.kubeclient.clock import utcnow
from kruntimes.kubeclient.kube import MERGE_PATCH, RUNS, ApiError, JSONObject, resource_version_of
from kruntimes.pure.model.objects import RunKey
from kruntimes.pure.readers.kube import decode_run
from kruntimes.pure.status import patch_body
from kruntimes.pure.step import Ambiguous, Conflict, Gone, ReadOutcome, Refused, StatusWrite, WriteOutcome, Written

DEFAULT_AMBIGUOUS_HOLD: Final = 60.0
"""Seconds after an ambiguous write is sent before a read may prove it never landed: kube-apiserver's
default ``--request-timeout`` (a request still in the server after it is abandoned)."""

_PERMANENT: Final = frozenset({"invalid", "unauthorized", "forbidden"})
_AMBIGUOUS: Final = frozenset({"server", "timeout", "transport", "bad_response"})


class StatusApi(Protocol):
    """What the binder needs from ``kube.Kube``."""

    def patch_status(
        self, path: str, body: str | bytes, content_type: str = MERGE_PATCH
    ) -> Result[JSONObject, ApiError]: ...

    def get(self, path: str) -> Result[JSONObject, ApiError]: ...



def write_outcome(result: Result[JSONObject, ApiError], deadline: datetime) -> WriteOutcome:
    """Sort one status write's answer (see the module docstring)."""
    stored = result.value_or(None)
    if stored is not None:
        return Written(resource_version_of(stored))
    error = result.failure()
    if error.kind == "conflict":
        return Conflict()
    if error.kind == "not_found":
        return Gone()
    if error.kind in _AMBIGUOUS:
        return Ambiguous(deadline, error.retry_after)
    return Refused(error.retry_after, permanent=error.kind in _PERMANENT)


@final
class Binder:
    """Writes Run status documents through the ``status`` subresource, and reads a Run back."""

    def __init__(
        self, kube: StatusApi, *, hold: float = DEFAULT_AMBIGUOUS_HOLD, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self._kube = kube
        self._hold = timedelta(seconds=hold)
        self._clock = clock
        self.last_error: ApiError | None = None
        """The last failed request's error, for the caller's log line (no effect on decisions)."""

    def deadline(self) -> datetime:
        """When a write sent now can no longer land."""
        return self._clock() + self._hold

    def write(self, write: StatusWrite) -> WriteOutcome:
        """Write ``write.patch`` for ``write.run``, guarded by the resourceVersion the cycle observed."""
        run = write.run
        deadline = self.deadline()
        body = patch_body(write.patch, run.resource_version)
        result = self._kube.patch_status(RUNS.path(run.namespace, run.name), body, MERGE_PATCH)
        self._remember(result)
        return write_outcome(result, deadline)

    def read(self, key: RunKey) -> ReadOutcome:
        """The Run as the server stores it now (a consistent read), gone, or why the read failed."""
        result = self._kube.get(RUNS.path(key.namespace, key.name))
        self._remember(result)
        stored = result.value_or(None)
        if stored is not None:
            decoded = decode_run(stored).value_or(None)
            return decoded if decoded is not None else Refused()
        outcome = write_outcome(result, self._clock())
        if isinstance(outcome, (Gone, Refused, Ambiguous)):
            return outcome
        return Refused()  # a 409 on a read: nothing learnt

    def _remember(self, result: Result[JSONObject, ApiError]) -> None:
        self.last_error = None if result.value_or(None) is not None else result.failure()

