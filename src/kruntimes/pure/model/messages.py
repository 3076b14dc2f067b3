"""Every reason and status message the scheduler writes, defined once (SPEC §3, §4, §6, §7).

Reasons are closed sets: they become condition reasons and metric labels, so a
new one is added here, never formatted at a call site. Messages carry the
runtime and workspace names the Run itself names, and nothing else: never a
pod name (except the bind condition's own pod), a Run name or selector text.
Names are written whole: the CRDs and Kubernetes bound every one to 253
characters, and decoding fails a Run whose names are longer (InvalidSpec).
This is a purely computational module with no side effects.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# --- condition types -----------------------------------------------------------

CONDITION_SCHEDULED: Final = "Scheduled"
CONDITION_RUNNING: Final = "Running"
CONDITION_COMPLETED: Final = "Completed"

# --- condition reasons ------------------------------------------------------------

REASON_ASSIGNED: Final = "Assigned"
REASON_UNSCHEDULABLE: Final = "Unschedulable"
REASON_CANCELLED: Final = "Cancelled"
REASON_INVALID_RESOURCES: Final = "InvalidResources"
REASON_INVALID_AFFINITY: Final = "InvalidAffinity"
REASON_INVALID_SPEC: Final = "InvalidSpec"

# --- filter rejection reasons (metric label values, SPEC §4, §9) --------------------

REJECT_RUNTIME_POD_UNAVAILABLE: Final = "RuntimePodUnavailable"
REJECT_RUN_AFFINITY: Final = "UnsatisfiedRunAffinity"
REJECT_RUN_ANTI_AFFINITY: Final = "UnsatisfiedRunAntiAffinity"
REJECT_WORKSPACE_UNAVAILABLE: Final = "WorkspaceUnavailable"
REJECT_WORKSPACE_PLACEMENT: Final = "WorkspacePlacement"

# --- messages -------------------------------------------------------------------------

CANCELLED_MESSAGE: Final = "cancelled by user"
INVALID_AFFINITY_PREFIX: Final = "invalid run affinity: "

def invalid_affinity_message(detail: str) -> str:
    """``invalid run affinity: <detail>``; ``detail`` names field paths only (decode guarantees it)."""
    return INVALID_AFFINITY_PREFIX + detail


def assigned_message(pod: str) -> str:
    """The bind condition's message: the one place a pod name appears in a status."""
    return f"assigned to runtime pod {pod}"


def waiting_for_pods(runtime: str) -> str:
    return f'waiting for available runtime pods for runtime "{runtime}"'


def waiting_for_affinity(runtime: str) -> str:
    return f'waiting for available runtime pods satisfying required Run affinity for runtime "{runtime}"'


def waiting_for_anti_affinity(runtime: str) -> str:
    return f'waiting for available runtime pods satisfying required Run anti-affinity for runtime "{runtime}"'


def waiting_for_workspace(workspace: str, runtime: str) -> str:
    return f'waiting for workspace "{workspace}" placement for runtime "{runtime}"'


_WORKSPACE_REASONS: Final = frozenset({REJECT_WORKSPACE_UNAVAILABLE, REJECT_WORKSPACE_PLACEMENT})


def wait_message(reasons: Iterable[str], runtime: str, workspace: str | None) -> str:
    """The Pending message for a cycle whose pods were rejected for ``reasons`` (SPEC §7).

    Precedence: affinity, then anti-affinity, then workspace, then the generic
    message. ``workspace`` is the name the Run references (``None`` without
    one); a workspace rejection without a name falls through to the generic
    message rather than printing an empty name.
    """
    seen = frozenset(reasons)
    if REJECT_RUN_AFFINITY in seen:
        return waiting_for_affinity(runtime)
    if REJECT_RUN_ANTI_AFFINITY in seen:
        return waiting_for_anti_affinity(runtime)
    if workspace is not None and not seen.isdisjoint(_WORKSPACE_REASONS):
        return waiting_for_workspace(workspace, runtime)
    return waiting_for_pods(runtime)
