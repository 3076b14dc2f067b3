"""Kubernetes Events about Runs: the scheduler's words on ``kubeclient.events``' recorder.

``Scheduled`` (Normal, ``assigned to runtime pod <pod>``) after a bind;
``FailedScheduling`` (Warning, the pods counted by why each refused the Run:
``pure.step.why_pending``) while a Run waits, but only when its message changes or once per
``repeat_interval`` (default 5 minutes) per Run, so a Run planned again and again does not
flood its namespace. Terminal decisions
(``InvalidResources``, ``InvalidAffinity``, ``Cancelled``…) get one event each.

Writing them (series, count patches, the rate limit, the write gate) is the recorder's; its
two verbs are exactly what the scheduler's RBAC grants (``deploy/scheduler/rbac.yaml``: create,
patch). The budget is the scheduler's, not each process's: in sharded mode a replica spends one
over the number of live replicas of its group (``share``), so four replicas write no more Events
than one would. Messages are the ones status writes carry, so they never name pods (except the
``Scheduled`` event's own pod), other Runs or selectors.

Leadership (SPEC §10): Events are writes, so only the leader makes them: the recorder's
``may_write`` is the scheduler's write gate, asked with the Event's namespace (in sharded mode
a replica writes only for the namespaces it owns), and a term's queue is dropped when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Final

from kruntimes.kubeclient.clock import utcnow
from kruntimes.kubeclient.events import EventApi, EventRecorder, EventSettings, EventType, ObjectReference
from kruntimes.kubeclient.threads import Supervisor
from kruntimes.pure.model import messages
from kruntimes.pure.model.objects import API_VERSION, Run

REASON_SCHEDULED: Final = "Scheduled"
REASON_FAILED_SCHEDULING: Final = "FailedScheduling"
COMPONENT: Final = "kruntimes-scheduler"


def reference(run: Run) -> ObjectReference:
    """The Run as an Event's ``involvedObject``."""
    return ObjectReference(API_VERSION, "Run", run.namespace, run.name, run.uid, run.resource_version)


class RunEvents(EventRecorder):
    """The Event recorder, written to as ``kruntimes-scheduler`` about Runs."""

    def __init__(
        self,
        kube: EventApi,
        settings: EventSettings = EventSettings(),
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], object] | None = None,
        may_write: Callable[[str], bool] = lambda namespace: True,
        share: Callable[[], float] = lambda: 1.0,
        supervisor: Supervisor | None = None,
    ) -> None:
        super().__init__(
            kube, settings, component=COMPONENT, clock=clock, now=now, sleep=sleep,
            may_write=may_write, share=share, supervisor=supervisor,
        )

    def scheduled(self, run: Run, pod: str) -> None:
        """``Scheduled``: the bind succeeded. Clears the Run's waiting state."""
        self.forget(run.namespace, run.uid, REASON_FAILED_SCHEDULING)
        self.record(reference(run), "Normal", REASON_SCHEDULED, messages.assigned_message(pod))

    def failed_scheduling(self, run: Run, message: str) -> bool:
        """``FailedScheduling`` with the wait message, if it changed or is due again; ``True`` when queued."""
        return self.about_run(run, "Warning", REASON_FAILED_SCHEDULING, message)

    def about_run(self, run: Run, type_: EventType, reason: str, message: str) -> bool:
        """Queue the event unless the same (Run, reason, message) was queued within ``repeat_interval``."""
        return self.deduplicated(reference(run), type_, reason, message)
