"""The fixtures of aitune_core.testing, for this folder only, and a clean plugin environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aitune_core import log
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins

PLUGIN_ENV = ("AITUNE_PLUGINS", "AITUNE_DISABLED_PLUGINS", "AITUNE_STRICT_PLUGINS")


@pytest.fixture(autouse=True)
def clean_plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PLUGIN_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def fresh_logger() -> Iterator[None]:
    """aitune's logger keeps the stderr it first wrote to: a test's captured one is closed after it."""
    log.reset()
    yield
    log.reset()
