"""aitune's conformance suite, with ONNX Runtime standing in for TensorRT.

The suite drives the backend through every lifecycle step, the checkpoint round trip
with moved artifacts, key and blueprint rules and min/opt/max correctness. With
:class:`aitune_trt.testing.OrtTensorRTBackend` it checks that everything aitune-trt
does around the engine holds those contracts on a CPU; the same suite against real
TensorRT engines is in ``test_gpu.py``.

The suite builds around forty backends. The TorchScript exporter exports these small
models in milliseconds where the dynamo exporter takes most of a second, so the suite
uses it; the dynamo export, the default, is covered in ``test_backend.py``.
"""

from __future__ import annotations

from aitune_core.testing import BackendConformance
from aitune_core.testing.models import KeywordsAndDynamicAxisCalls
from aitune_trt.testing import OrtTensorRTBackend


class TestOrtStandInConformance(BackendConformance):
    batch_sizes = (2, 4, 8)
    rtol, atol = 1e-4, 1e-5

    def make_backend(self) -> OrtTensorRTBackend:
        return OrtTensorRTBackend(exporter="torchscript")

    def make_other_backend(self) -> OrtTensorRTBackend:
        return OrtTensorRTBackend(exporter="torchscript", optimization_level=5, workspace_bytes=1 << 30)


class TestOrtStandInSampleProfilesConformance(KeywordsAndDynamicAxisCalls, BackendConformance):
    """Keyword calls, a dynamic axis, and one profile per recorded shape plus the graph's."""

    rtol, atol = 1e-4, 1e-5

    def make_backend(self) -> OrtTensorRTBackend:
        return OrtTensorRTBackend(exporter="torchscript", profile_source="samples")
