"""The module wrapper: recording, tuned routing and passthrough."""

from aitune_core.module.wrapper import (
    MODULE_REGISTRY,
    Module,
    ModuleState,
    UnsupportedCallError,
    recording_session,
)

__all__ = ["MODULE_REGISTRY", "Module", "ModuleState", "UnsupportedCallError", "recording_session"]
