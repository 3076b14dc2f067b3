"""The built-in plugins, one module each, every one with its pure predicate beside it.

A plugin module imports the framework's protocols for its conformance line
only (under ``TYPE_CHECKING``), so the framework can import the plugins to build
``DEFAULT_REGISTRY`` without an import cycle. The default set and the filter
order live in one place: ``kruntimes.pure.framework.DEFAULT_REGISTRY``.
"""

from kruntimes.pure.plugins.affinity import RunAffinity, hosting_pods, seedable
from kruntimes.pure.plugins.availability import RuntimePodAvailability, available_and_fits
from kruntimes.pure.plugins.least_loaded import (
    LeastLoaded,
    LoadKey,
    group_starts,
    least_loaded_keys,
    load_key,
    rank_scores,
)
from kruntimes.pure.plugins.preferred import PreferredRunAffinity, normalize_to_max, preferred_raw_scores
from kruntimes.pure.plugins.workspace import (
    NoConstraint,
    OnlyPod,
    Unavailable,
    WorkspaceConstraint,
    WorkspacePlacement,
    workspace_constraint,
)

__all__ = [
    "LeastLoaded",
    "LoadKey",
    "NoConstraint",
    "OnlyPod",
    "PreferredRunAffinity",
    "RunAffinity",
    "RuntimePodAvailability",
    "Unavailable",
    "WorkspaceConstraint",
    "WorkspacePlacement",
    "available_and_fits",
    "group_starts",
    "hosting_pods",
    "least_loaded_keys",
    "load_key",
    "normalize_to_max",
    "preferred_raw_scores",
    "rank_scores",
    "seedable",
    "workspace_constraint",
]
