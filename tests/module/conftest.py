from __future__ import annotations

from aitune_core.testing import fixtures

# Fake plugin distributions, for tests that need a plugin's hook to run during tuning.
aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins
