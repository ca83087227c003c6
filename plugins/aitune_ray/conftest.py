"""Lets the tests run from a source checkout, without installing the plugin or the core."""

import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("aitune_ray") is None:
    sys.path.insert(0, str(_HERE))
if importlib.util.find_spec("aitune_core") is None:
    sys.path.insert(0, str(_HERE.parents[1]))
