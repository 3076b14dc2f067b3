"""The condition types, condition reasons and status messages of the scheduler, defined once (SPEC §3, §6, §7).

Reasons are closed sets: they become condition reasons, so a new one is added
here, never formatted at a call site. A filter plugin's rejection reasons (the
metric labels) are its own: each plugin module declares them beside the filter
that returns them, and says which of the Pending messages below they call for
and with what precedence. Messages carry the
runtime and workspace names the Run itself names, and nothing else: never a
pod name (except the bind condition's own pod), a Run name or selector text.
Names are written whole: the CRDs and Kubernetes bound every one to 253
characters, and decoding fails a Run whose names are longer (InvalidSpec).
This is a purely computational module with no side effects.
"""

from __future__ import annotations

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

# --- messages -------------------------------------------------------------------------

CANCELLED_MESSAGE: Final = "cancelled by user"
INVALID_AFFINITY_PREFIX: Final = "invalid run affinity: "

def invalid_affinity_message(detail: str) -> str:
    """``invalid run affinity: <detail>``; ``detail`` names field paths only (decode guarantees it)."""
    return INVALID_AFFINITY_PREFIX + detail


def assigned_message(pod: str) -> str:
    """The bind condition's message: the one place a pod name appears in a status."""
    return f"assigned to runtime pod {pod}"


# The SPEC §7 Pending messages. The generic one is the framework's fallback; the
# others are the built-in plugins' (RunAffinity, WorkspacePlacement), kept here
# beside it because ``verify`` judges a status against all four forms.


def waiting_for_pods(runtime: str) -> str:
    return f'waiting for available runtime pods for runtime "{runtime}"'


def waiting_for_affinity(runtime: str) -> str:
    return f'waiting for available runtime pods satisfying required Run affinity for runtime "{runtime}"'


def waiting_for_anti_affinity(runtime: str) -> str:
    return f'waiting for available runtime pods satisfying required Run anti-affinity for runtime "{runtime}"'


def waiting_for_workspace(workspace: str, runtime: str) -> str:
    return f'waiting for workspace "{workspace}" placement for runtime "{runtime}"'
