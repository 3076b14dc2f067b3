"""The default plugin set: one line per plugin, in the order that is observable.

Adding a plugin to the defaults is one new file in this package and one line
here; a library user builds their own set the same way (``EMPTY_REGISTRY`` or
``DEFAULT_REGISTRY`` plus ``register_filter`` / ``register_score``).
"""

from __future__ import annotations

from typing import Final

from kruntimes.pure.framework.registry import EMPTY_REGISTRY, Registry, must
from kruntimes.pure.plugins.affinity import RunAffinity
from kruntimes.pure.plugins.availability import RuntimePodAvailability
from kruntimes.pure.plugins.least_loaded import LeastLoaded
from kruntimes.pure.plugins.preferred import PreferredRunAffinity
from kruntimes.pure.plugins.workspace import WorkspacePlacement

__all__ = ["DEFAULT_REGISTRY"]

# The default plugin set, one line per plugin. Filter order is SPEC §4's and it is
# observable: a pod is counted under the first filter that rejects it, and the wait
# message follows those counts. Availability first (a pod that is down or full is
# "unavailable", whatever else is true of it), then required Run (anti-)affinity,
# then workspace placement. Score plugins are independent of each other; their
# registration order is the order of `PodScore.by_plugin` and of the logged weights.
DEFAULT_REGISTRY: Final[Registry] = must(
    EMPTY_REGISTRY.register_filter("RuntimePodAvailability", RuntimePodAvailability)
    .bind(lambda r: r.register_filter("RunAffinity", RunAffinity))
    .bind(lambda r: r.register_filter("WorkspacePlacement", WorkspacePlacement))
    .bind(lambda r: r.register_score("PreferredRunAffinity", 1, PreferredRunAffinity))
    .bind(lambda r: r.register_score("LeastLoaded", 1, LeastLoaded))
)
