"""Shared helpers of the plugin tests: the checked-in fake distributions and a clean environment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aitune_core.plugins.registry import PluginRegistry
from aitune_core.testing import fixtures

# The fixtures of aitune_core.testing, for this folder only (a project would rather put
# pytest_plugins = ["aitune_core.testing"] in its top-level conftest.py).
aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins
aitune_clean_plugin_env = fixtures.aitune_clean_plugin_env

FAKE_DISTS = Path(__file__).parent / "fake_dists"


@pytest.fixture(autouse=True)
def clean_plugin_env(aitune_clean_plugin_env: None) -> None:
    """Every test here runs without the variables that choose plugins, whatever the shell set."""


@pytest.fixture
def load_fakes(aitune_isolated_plugins: Any) -> Callable[..., PluginRegistry]:
    """Load the built-in plugin plus the named folders of ``fake_dists/``, and nothing else."""

    def load(*names: str, **options: Any) -> PluginRegistry:
        return aitune_isolated_plugins.load(*(FAKE_DISTS / name for name in names), **options)  # type: ignore[no-any-return]

    return load
