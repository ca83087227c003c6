"""The module wrapper: recording, tuned routing and passthrough."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "MODULE_REGISTRY": "aitune_core.module.wrapper",
    "Module": "aitune_core.module.wrapper",
    "ModuleState": "aitune_core.module.wrapper",
    "UnsupportedCallError": "aitune_core.module.wrapper",
    "recording_session": "aitune_core.module.wrapper",
}

__all__ = ["MODULE_REGISTRY", "Module", "ModuleState", "UnsupportedCallError", "recording_session"]

__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"module 'aitune_core.module' has no attribute {name!r}"
)

if TYPE_CHECKING:
    from aitune_core.module.wrapper import MODULE_REGISTRY, Module, ModuleState, UnsupportedCallError, recording_session
