"""What a plugin's tests look at inside the core, beyond :mod:`aitune_core.plugin_api`.

A backend's own code needs only the plugin API. Its tests also check what the engine
did with the backend: which plugins loaded and what they registered, the route a tuned
call took, the log, the files a checkpoint holds, a config's JSON round trip, a graph
widened to declared ranges. Those names are offered here, so that plugin tests import
the core only through ``plugin_api``, ``testing`` and ``aitune_core`` itself (an import
contract of the ``lint`` session checks it): when a module moves inside the core, this
file changes and the plugins' tests do not.
"""

from __future__ import annotations

from aitune_core.checkpoint.files import sha256_of
from aitune_core.demo.models import DemoCNN, DemoMLP, cnn_samples, mlp_samples
from aitune_core.executors.registry import executor_names, get_executor_class
from aitune_core.graphs.declared_dims import DynamicShapes
from aitune_core.graphs.declared_graph import declared_graph
from aitune_core.log import capture
from aitune_core.metadata.copies import holds_state, owned_copy
from aitune_core.metadata.locator import walk
from aitune_core.metadata.sample_metadata import ShapeChoice
from aitune_core.module.router import Route
from aitune_core.plugins.manager import default_candidates, get_backend_class
from aitune_core.plugins.records import PluginStatus
from aitune_core.serialization import converter
from aitune_core.strategies.defaults import LOSSY_REASON

__all__ = [
    "LOSSY_REASON",
    "DemoCNN",
    "DemoMLP",
    "DynamicShapes",
    "PluginStatus",
    "Route",
    "ShapeChoice",
    "capture",
    "cnn_samples",
    "converter",
    "declared_graph",
    "default_candidates",
    "executor_names",
    "get_backend_class",
    "get_executor_class",
    "holds_state",
    "mlp_samples",
    "owned_copy",
    "sha256_of",
    "walk",
]
