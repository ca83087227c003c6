"""Partitioning tests: one thread, failed loads that change nothing, the test backend installed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aitune_core.testing import fixtures
from aitune_core.testing.load_guard import guard_failed_loads

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins
aitune_one_thread = fixtures.aitune_one_thread


@pytest.fixture(autouse=True)
def _one_thread(aitune_one_thread: None) -> None:
    """Timing comparisons here must not depend on how busy the other core is."""


@pytest.fixture(autouse=True)
def _failed_loads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return guard_failed_loads(monkeypatch)


@pytest.fixture
def traced(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> Path:
    """The test backend installed as a plugin (so checkpoints naming it load); returns the distribution's folder."""
    dist = aitune_fake_dist("aitune-test-traced", entry_points={"traced": "partition_helpers"})
    aitune_isolated_plugins.load(dist)
    return dist.path
