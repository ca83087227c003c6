"""aitune's plugin system: entry-point group ``aitune.plugins``, hooks in :mod:`.hookspecs`.

``aitune_core.plugins`` is both this package and a function: ``aitune_core.plugins()``
lists every plugin found, with its status, as ``aitune plugins`` does. Importing it
loads no plugin and imports neither pluggy nor the entry-point machinery; that happens
on first use of the registry.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "BASELINE_PRIORITY": "aitune_core.plugins.api",
    "DEFAULT_PRIORITY": "aitune_core.plugins.api",
    "ENTRY_POINT_GROUP": "aitune_core.plugins.api",
    "MIN_SUPPORTED_PLUGIN_API": "aitune_core.plugins.api",
    "PLUGIN_API_VERSION": "aitune_core.plugins.api",
    "hookimpl": "aitune_core.plugins.api",
    "backend_names": "aitune_core.plugins.manager",
    "choose_strategy": "aitune_core.plugins.manager",
    "default_candidates": "aitune_core.plugins.manager",
    "get_backend_class": "aitune_core.plugins.manager",
    "plugins": "aitune_core.plugins.manager",
    "reset_plugins": "aitune_core.plugins.manager",
    "Candidate": "aitune_core.plugins.records",
    "ContainerRegistrar": "aitune_core.plugins.records",
    "PluginError": "aitune_core.plugins.records",
    "PluginHookError": "aitune_core.plugins.records",
    "PluginRecord": "aitune_core.plugins.records",
    "PluginStatus": "aitune_core.plugins.records",
    "UnknownBackendError": "aitune_core.plugins.records",
}
"""Names imported on first use: a plugin that imports :mod:`.api` or :mod:`.hookspecs` runs this package
first, and should not pay for the manager or the records."""

__all__ = [
    "BASELINE_PRIORITY",
    "DEFAULT_PRIORITY",
    "ENTRY_POINT_GROUP",
    "MIN_SUPPORTED_PLUGIN_API",
    "PLUGIN_API_VERSION",
    "Candidate",
    "ContainerRegistrar",
    "PluginError",
    "PluginHookError",
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


__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"module 'aitune_core.plugins' has no attribute {name!r}"
)


class _CallablePackage(types.ModuleType):
    """Lets ``aitune_core.plugins()`` list plugins while the package stays importable."""

    def __call__(self) -> list[PluginRecord]:
        listing: Callable[[], list[PluginRecord]] = __getattr__("plugins")
        return listing()


sys.modules[__name__].__class__ = _CallablePackage


if TYPE_CHECKING:
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
        PluginHookError,
        PluginRecord,
        PluginStatus,
        UnknownBackendError,
    )
