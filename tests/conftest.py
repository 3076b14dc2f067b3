"""Shared test settings: hypothesis profiles, the session's real control plane, and helm built before the first test.

Every test runs under pytest-timeout's limit (``timeout`` in pyproject.toml): a hang fails its test
with every thread's stack, in minutes, instead of holding ``make test`` until CI's own limit.

``ci`` (the default) keeps example counts modest so the whole suite stays fast;
``mutation`` (``make mutate``) is ``ci`` with fixed examples; ``thorough`` is for a deliberate, longer run:
``HYPOTHESIS_PROFILE=thorough make unit``. A property that needs another count than
the profile's states it with :func:`examples`, so every profile scales it too.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Final, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.controlplane import session as controlplane
from tests.controlplane.server import ControlPlane
from tests.deploy import helm

CI_EXAMPLES: Final = 60

settings.register_profile(
    "ci",
    max_examples=CI_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("thorough", max_examples=2_000, deadline=None, print_blob=True)
# `make mutate`: the same examples on every run, so a mutant is killed or survives by what it
# changes, not by which examples a run happened to draw.
settings.register_profile("mutation", parent=settings.get_profile("ci"), derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def examples(at_ci: int) -> int:
    """``max_examples`` for a property that runs ``at_ci`` examples under the ``ci`` profile.

    Another profile scales it as it scales the default (``thorough``: × 2,000/60), up to
    that profile's own count: a costly property that runs few examples under ``ci`` gets
    proportionally more, one that already runs more than the default gets the profile's
    count where that is larger (a proportional 10,000 would outlast the per-test timeout).
    Read when the test module is imported, after the profile is loaded (by this module,
    or by hypothesis' ``--hypothesis-profile`` at configure time)."""
    profile = settings().max_examples
    return max(at_ci, min(at_ci * profile // CI_EXAMPLES, profile))


_T = TypeVar("_T")


def reached(strategy: st.SearchStrategy[_T], labels: Callable[[_T], Iterable[str]], at_ci: int) -> Counter[str]:
    """In how many of ``examples(at_ci)`` values drawn from ``strategy`` each label occurs:
    what a property over that strategy exercises under the loaded profile.

    Derandomized (the same values on every run of a profile), so a test can require a
    label without ever failing by chance; the property itself keeps drawing afresh."""
    seen: Counter[str] = Counter()

    @settings(
        max_examples=examples(at_ci),
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(strategy)
    def draw(value: _T) -> None:
        seen.update(set(labels(value)))

    draw()
    return seen


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos-large",
        action="store_true",
        default=False,
        help="run tests/chaos at the large size (also: KRUNTIMES_CHAOS=large)",
    )


def pytest_configure(config: pytest.Config) -> None:
    controlplane.configure()
    controlplane.prebuild()
    helm.prebuild()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    controlplane.unconfigure(failed=exitstatus not in (0, 5))


@pytest.fixture(scope="session")
def control_plane() -> ControlPlane:
    """The session's real kube-apiserver + etcd (built from pinned Go modules), shared by all workers."""
    return controlplane.shared()
