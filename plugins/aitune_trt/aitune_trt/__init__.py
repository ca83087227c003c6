"""aitune-trt: TensorRT engines for aitune graphs.

* :class:`TensorRTBackend` / :class:`TensorRTBackendConfig`: the backend (name
  ``"tensorrt"``): ONNX export through aitune-onnx, an engine built with optimization
  profiles from the recorded shapes, and calls routed to the profile that takes them.
* :class:`TensorRTProfile` (with :class:`ProfileInput` and :class:`ShapeRange`): an
  optimization profile, a (min, opt, max) shape per input, keyed by access path and
  ONNX input name.
* :class:`OutOfProfileError`, :class:`ProfileError`, :class:`TensorRTBuildError`: what
  goes wrong, with the reasons.

Importing this package, or loading the plugin, never imports tensorrt (nor onnx);
only building or loading an engine does, in :mod:`aitune_trt.engine`.
"""

from aitune_trt._version import __version__
from aitune_trt.backend import TensorRTBackend
from aitune_trt.config import TensorRTBackendConfig
from aitune_trt.errors import TensorRTBuildError
from aitune_trt.profiles import OutOfProfileError, ProfileError, ProfileInput, ShapeRange, TensorRTProfile

__all__ = [
    "OutOfProfileError",
    "ProfileError",
    "ProfileInput",
    "ShapeRange",
    "TensorRTBackend",
    "TensorRTBackendConfig",
    "TensorRTBuildError",
    "TensorRTProfile",
    "__version__",
]
