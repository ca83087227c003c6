"""The entry point aitune loads (group ``aitune.plugins``): transformers' caches and the prefill/decode key.

Loading the plugin imports transformers only where the process has imported it
already (a model built from it); otherwise the first call of a wrapped module after
transformers is imported registers the caches. A process that never uses transformers
never imports it.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from typing import Any

from aitune_core.plugin_api import PLUGIN_API_VERSION, ContainerRegistrar, hookimpl, register_container
from aitune_transformers.caches import cache_types, flattener, rebuilder
from aitune_transformers.phase import phase

AITUNE_PLUGIN_API = PLUGIN_API_VERSION

_registered: tuple[type, ...] = ()


def _register(register: Any) -> tuple[type, ...]:
    kinds = cache_types()
    for cls in kinds:
        register(cls, flattener(kinds), rebuilder(kinds), "attr", cls.__qualname__)
    return kinds


@hookimpl
def aitune_register_containers(containers: ContainerRegistrar) -> None:
    global _registered
    if "transformers" in sys.modules and not _registered:
        _registered = _register(containers.register)


@hookimpl
def aitune_graph_key_parts(arguments: dict[str, Any]) -> Hashable | None:
    global _registered
    if not _registered:
        if "transformers" not in sys.modules:
            return None
        _registered = _register(register_container)  # transformers was imported after the plugins loaded
    return phase(arguments, _registered[:1])


@hookimpl
def aitune_graph_key_reads() -> tuple[str, ...]:
    """The one plain tensor the phase reads; ``model(x)`` under any other name is never keyed (see :func:`phase`)."""
    return ("cache_position",)
