from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aitune_core.config import config
from aitune_core.testing import fixtures

# Fake plugin distributions, for tests that need a plugin's hook to run during tuning.
aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path) -> Iterator[None]:
    config.cache_dir = tmp_path / "cache"
    yield
