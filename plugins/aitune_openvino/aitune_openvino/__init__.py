"""aitune-openvino: an OpenVINO backend for aitune, on CPUs.

:class:`OpenVINOBackend` (name ``"openvino"``) converts a graph's ``torch.export``
program to an OpenVINO IR with the graph's batch and dynamic ranges (tracing when the
export fails), compiles it for the CPU with float32 inference precision pinned, and
ships the IR in checkpoints. :class:`OpenVINOConfig` holds its settings.

Importing this package does not import OpenVINO; building or loading a backend does.
"""

from aitune_openvino.backend import OpenVINOBackend
from aitune_openvino.config import OpenVINOConfig

__all__ = ["OpenVINOBackend", "OpenVINOConfig", "__version__"]
__version__ = "0.1.0"
