"""The fixtures of aitune_core.testing, for this folder only, and a clean plugin environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aitune_core import log
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins
aitune_clean_plugin_env = fixtures.aitune_clean_plugin_env


@pytest.fixture(autouse=True)
def clean_plugin_env(aitune_clean_plugin_env: None) -> None:
    """Every test here runs without the variables that choose plugins, whatever the shell set."""


@pytest.fixture(autouse=True)
def fresh_logger() -> Iterator[None]:
    """aitune's logger keeps the stderr it first wrote to: a test's captured one is closed after it."""
    log.reset()
    yield
    log.reset()
