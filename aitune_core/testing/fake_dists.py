"""Writing throwaway installed distributions, so plugin discovery can be tested for real.

A folder holding ``<module>.py`` and ``<name>-<version>.dist-info/`` with ``METADATA``
and ``entry_points.txt`` is, once on ``sys.path``, an installed distribution to
``importlib.metadata``: no pip, no virtualenv.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from pathlib import Path

import attrs

from aitune_core.plugins.api import ENTRY_POINT_GROUP


@attrs.frozen
class FakeDist:
    """A written distribution. Put ``path`` on ``sys.path`` to install it."""

    path: Path
    distribution: str
    version: str
    module: str
    entry_points: dict[str, str]


def write_fake_dist(
    root: Path,
    distribution: str,
    source: str | None = None,
    *,
    version: str = "1.0",
    module: str | None = None,
    entry_points: Mapping[str, str] | None = None,
) -> FakeDist:
    """Write distribution ``distribution`` into a new folder under ``root``.

    ``source`` becomes ``<module>.py`` (``module`` defaults to the distribution name
    with ``-`` turned into ``_``); leave it out to point entry points at a module that
    already exists. ``entry_points`` maps entry-point names to ``module[:attr]`` values in
    the ``aitune.plugins`` group; by default one entry point, named after the module.
    """
    module = module or re.sub(r"[-.]+", "_", distribution)
    entry_points = dict(entry_points) if entry_points is not None else {module: module}
    path = Path(root) / re.sub(r"[-.]+", "_", distribution)
    path.mkdir(parents=True, exist_ok=False)
    if source is not None:
        (path / f"{module}.py").write_text(textwrap.dedent(source))
    info = path / f"{re.sub(r'[-.]+', '_', distribution)}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{name} = {value}" for name, value in entry_points.items()), ""]
    (info / "entry_points.txt").write_text("\n".join(lines))
    return FakeDist(path, distribution, version, module, entry_points)
