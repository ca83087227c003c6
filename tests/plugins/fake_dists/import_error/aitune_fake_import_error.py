"""A plugin whose dependency is missing: importing it fails."""

import aitune_fake_missing_dependency  # noqa: F401

AITUNE_PLUGIN_API = 1
