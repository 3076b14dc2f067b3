"""Chaos sizes: quick by default; ``--chaos-large`` (registered in ``tests/conftest.py``) or
``KRUNTIMES_CHAOS=large`` selects the large size."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def chaos_large(request: pytest.FixtureRequest) -> bool:
    try:
        flag = bool(request.config.getoption("--chaos-large"))
    except ValueError:  # a conftest-less run (pytest pointed at one file outside tests/)
        flag = False
    return flag or os.environ.get("KRUNTIMES_CHAOS", "").lower() == "large"
