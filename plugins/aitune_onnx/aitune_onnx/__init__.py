"""aitune-onnx: ONNX export of aitune graphs, and an ONNX Runtime backend.

* :class:`ONNXRuntimeBackend` / :class:`ONNXRuntimeBackendConfig`: the backend (name
  ``"onnxruntime"``), with a configurable execution provider and session options.
* :func:`export_graph` / :class:`ExportConfig` / :class:`ExportedModel` /
  :class:`ExportError`: exporting one recorded graph to a checked ``.onnx`` file with
  named, flat inputs and outputs and symbolic batch and dynamic axes, for other
  backends (TensorRT) to build on.

Importing this package imports neither onnx, onnxscript nor onnxruntime; they are
imported when a graph is exported or a session created.
"""

from aitune_core.plugin_api.exported import IOLayout, sanitize
from aitune_onnx._version import __version__
from aitune_onnx.backend import ONNXRuntimeBackend
from aitune_onnx.config import ONNXRuntimeBackendConfig
from aitune_onnx.export import ExportConfig, ExportedModel, ExportError, export_graph

__all__ = [
    "ExportConfig",
    "ExportError",
    "ExportedModel",
    "IOLayout",
    "ONNXRuntimeBackend",
    "ONNXRuntimeBackendConfig",
    "__version__",
    "export_graph",
    "sanitize",
]
