"""A plugin's packaging as its tests check it: the ``pyproject.toml`` beside the tests, and what is installed.

A plugin is found through its ``aitune.plugins`` entry point, so its tests check the
declaration in the source and, where the distribution is installed, the metadata pip
wrote from it; a source checkout that was never installed has only the first.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

ENTRY_POINT_GROUP = "aitune.plugins"


def pyproject(test_file: str | Path) -> dict[str, Any]:
    """The ``pyproject.toml`` of the project whose ``tests`` folder holds ``test_file`` (a test's ``__file__``)."""
    return tomllib.loads((Path(test_file).resolve().parents[1] / "pyproject.toml").read_text())


def installed_entry_points(distribution: str) -> list[tuple[str, str]] | None:
    """``(name, value)`` of each of the installed distribution's plugin entry points; None when it is not installed."""
    try:
        installed = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    return [(entry.name, entry.value) for entry in installed.entry_points.select(group=ENTRY_POINT_GROUP)]
