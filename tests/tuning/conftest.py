"""The tuning tests: one torch thread each (the cache folder per test comes from the root conftest)."""

from __future__ import annotations

import pytest

from aitune_core.testing import fixtures

aitune_one_thread = fixtures.aitune_one_thread


@pytest.fixture(autouse=True)
def _one_thread(aitune_one_thread: None) -> None:
    """Timing comparisons here must not depend on how busy the other core is."""
