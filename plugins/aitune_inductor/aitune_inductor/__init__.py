"""aitune-inductor: TorchInductor backends for aitune, JIT (``torch.compile``) and AOT (AOT Inductor).

Importing this package compiles nothing and does not import Inductor, Dynamo or
``torch.export``; they are imported when a backend is built or loaded.
"""

from aitune_inductor._version import __version__
from aitune_inductor.aot import TorchInductorAotBackend, TorchInductorAotBackendConfig
from aitune_inductor.jit import TorchInductorJitBackend, TorchInductorJitBackendConfig

__all__ = [
    "TorchInductorAotBackend",
    "TorchInductorAotBackendConfig",
    "TorchInductorJitBackend",
    "TorchInductorJitBackendConfig",
    "__version__",
]
