"""Chaos sizes: quick by default; ``--chaos-large`` (registered in ``tests/conftest.py``) or
``KRUNTIMES_CHAOS=large`` selects the large size. The servers an epoch runs on: ``chaos_server``."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import pytest

from tests.controlplane import session as controlplane

from .harness import Target
from .servers import ChaosPlane, dev_server, real_server


@pytest.fixture
def chaos_large(request: pytest.FixtureRequest) -> bool:
    try:
        flag = bool(request.config.getoption("--chaos-large"))
    except ValueError:  # a conftest-less run (pytest pointed at one file outside tests/)
        flag = False
    return flag or os.environ.get("KRUNTIMES_CHAOS", "").lower() == "large"


@pytest.fixture(scope="session")
def chaos_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosPlane]:
    """A control plane of the chaos tests' own (they delete everything between epochs and switch
    deploy/ RBAC between modes), with deploy/ applied."""
    for plane in controlplane.private(tmp_path_factory.mktemp("chaos-controlplane")):
        yield ChaosPlane(plane)


@pytest.fixture(params=["dev", "real"])
def chaos_server(request: pytest.FixtureRequest) -> Target:
    """Where an epoch runs: the in-process dev cluster, or the real kube-apiserver (judged by deploy/ RBAC)."""
    if request.param == "dev":
        return Target("dev", dev_server)
    chaos_plane: ChaosPlane = request.getfixturevalue("chaos_plane")
    return Target("real", functools.partial(real_server, chaos_plane))
