"""aitune-torchao: torchao quantization (int8, int4, float8, MX, NVFP4) as an aitune backend.

Importing this package does not import torchao; it is imported when a backend is
built or loaded, or when an explicit torchao config is given.
"""

from aitune_torchao._version import __version__
from aitune_torchao.backend import TorchAOBackend
from aitune_torchao.config import NotCheckpointableError, TorchAOBackendConfig
from aitune_torchao.filters import ModuleFilter
from aitune_torchao.presets import PRESETS, Preset

__all__ = [
    "PRESETS",
    "ModuleFilter",
    "NotCheckpointableError",
    "Preset",
    "TorchAOBackend",
    "TorchAOBackendConfig",
    "__version__",
]
