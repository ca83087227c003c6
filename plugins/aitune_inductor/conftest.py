"""Enables aitune's pytest plugins (see :mod:`aitune_core.testing`), and lets the tests run from a source checkout."""

import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("aitune_inductor") is None:
    sys.path.insert(0, str(_HERE))
if importlib.util.find_spec("aitune_core") is None:
    sys.path.insert(0, str(_HERE.parents[1]))
sys.path.insert(0, str(_HERE / "tests"))  # the tests' helper modules (fresh_process)

pytest_plugins = ["aitune_core.testing", "aitune_core.testing.isolation", "aitune_core.testing.recorded"]
