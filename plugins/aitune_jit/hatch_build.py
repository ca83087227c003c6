"""Ship ``aitune_jit.pth`` at the top of site-packages, for normal and editable installs alike.

A ``.pth`` file there runs its ``import`` line at interpreter start: the one line that
lets ``AITUNE_JIT=1 python script.py`` tune a script that never imports aitune (see
``aitune_jit/startup.py``). A wheel gets it through ``force-include`` in pyproject.toml;
an editable wheel (``pip install -e``) only through ``force_include_editable``, which is
set here, so that contributors' installs start the JIT too.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PTH = "aitune_jit/aitune_jit.pth"


class StartupHook(BuildHookInterface):  # type: ignore[misc]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            build_data.setdefault("force_include_editable", {})[PTH] = "aitune_jit.pth"
