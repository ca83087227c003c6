from __future__ import annotations

from aitune_core.testing import fixtures

# Fake plugin distributions: a checkpoint names its backends, which a plugin must register to load them.
aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins
