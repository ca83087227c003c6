"""Enables aitune's pytest plugin, and lets the tests run from a source checkout."""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("aitune_example_backend") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest_plugins = ["aitune_core.testing"]
