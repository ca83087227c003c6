"""aitune's plugin system: entry-point group ``aitune.plugins``, hooks in :mod:`.hookspecs`.

``aitune_core.plugins`` is both this package and a function: ``aitune_core.plugins()``
lists every plugin found, with its status, as ``aitune plugins`` does. Importing it
loads no plugin and imports neither pluggy nor the entry-point machinery; that happens
on first use of the registry.
"""

from __future__ import annotations

import sys
import types

from aitune_core.plugins.api import (
    BASELINE_PRIORITY,
    DEFAULT_PRIORITY,
    ENTRY_POINT_GROUP,
    MIN_SUPPORTED_PLUGIN_API,
    PLUGIN_API_VERSION,
    hookimpl,
)
from aitune_core.plugins.manager import (
    backend_names,
    choose_strategy,
    default_candidates,
    get_backend_class,
    plugins,
    reset_plugins,
)
from aitune_core.plugins.records import (
    Candidate,
    ContainerRegistrar,
    PluginError,
    PluginRecord,
    PluginStatus,
    UnknownBackendError,
)

__all__ = [
    "BASELINE_PRIORITY",
    "DEFAULT_PRIORITY",
    "ENTRY_POINT_GROUP",
    "MIN_SUPPORTED_PLUGIN_API",
    "PLUGIN_API_VERSION",
    "Candidate",
    "ContainerRegistrar",
    "PluginError",
    "PluginRecord",
    "PluginStatus",
    "UnknownBackendError",
    "backend_names",
    "choose_strategy",
    "default_candidates",
    "get_backend_class",
    "hookimpl",
    "plugins",
    "reset_plugins",
]


class _CallablePackage(types.ModuleType):
    """Lets ``aitune_core.plugins()`` list plugins while the package stays importable."""

    def __call__(self) -> list[PluginRecord]:
        return plugins()


sys.modules[__name__].__class__ = _CallablePackage
