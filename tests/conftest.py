"""Shared test settings: hypothesis profiles, the session's real control plane, and helm built before the first test.

Every test runs under pytest-timeout's limit (``timeout`` in pyproject.toml): a hang fails its test
with every thread's stack, in minutes, instead of holding ``make test`` until CI's own limit.

``ci`` (the default) keeps example counts modest so the whole suite stays fast;
``thorough`` is for a deliberate, longer run:
``HYPOTHESIS_PROFILE=thorough make unit``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.controlplane import session as controlplane
from tests.controlplane.server import ControlPlane
from tests.deploy import helm

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("thorough", max_examples=2_000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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
