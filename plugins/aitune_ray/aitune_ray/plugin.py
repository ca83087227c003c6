"""The entry point aitune loads (group ``aitune.plugins``): registers the ``"ray"`` executor.

Loading the plugin imports neither Ray nor torch compilers: Ray is imported when the
executor first connects.
"""

from __future__ import annotations

from collections.abc import Sequence

from aitune_core.plugin_api import PLUGIN_API_VERSION, hookimpl
from aitune_core.plugin_api.executors import Executor
from aitune_ray.executor import RayExecutor

AITUNE_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def aitune_register_executors() -> Sequence[type[Executor]]:
    return [RayExecutor]
