"""Partitioning tests: their own cache, one thread, failed loads that change nothing, the test backend installed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aitune_core.config import config
from aitune_core.testing import fixtures
from aitune_core.testing.load_guard import guard_failed_loads

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path) -> None:
    config.cache_dir = tmp_path / "cache"


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _failed_loads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return guard_failed_loads(monkeypatch)


@pytest.fixture
def traced(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> Path:
    """The test backend installed as a plugin (so checkpoints naming it load); returns the distribution's folder."""
    dist = aitune_fake_dist("aitune-test-traced", entry_points={"traced": "partition_helpers"})
    aitune_isolated_plugins.load(dist)
    return dist.path
