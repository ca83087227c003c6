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

import torch

from aitune_core.testing import BackendConformance
from aitune_trt.testing import OrtTensorRTBackend


class TestOrtStandInConformance(BackendConformance):
    batch_sizes = (2, 4, 8)
    rtol, atol = 1e-4, 1e-5

    def make_backend(self) -> OrtTensorRTBackend:
        return OrtTensorRTBackend(exporter="torchscript")

    def make_other_backend(self) -> OrtTensorRTBackend:
        return OrtTensorRTBackend(exporter="torchscript", optimization_level=5, workspace_bytes=1 << 30)


class KeywordsAndDynamicAxis(torch.nn.Module):
    """Called with keywords; ``tokens`` also has a dynamic (non-batch) axis."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(6, 6)

    def forward(self, tokens: torch.Tensor, scale: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = self.proj(tokens) * scale
        return {"hidden": hidden, "pooled": hidden.mean(dim=1)}


class TestOrtStandInSampleProfilesConformance(BackendConformance):
    """Keyword calls, a dynamic axis, and one profile per recorded shape plus the graph's."""

    batch_sizes = (2, 3)
    rtol, atol = 1e-4, 1e-5

    def make_backend(self) -> OrtTensorRTBackend:
        return OrtTensorRTBackend(exporter="torchscript", profile_source="samples")

    def make_model(self) -> torch.nn.Module:
        return KeywordsAndDynamicAxis()

    def make_inputs(self, batch_size: int) -> dict[str, torch.Tensor]:
        return {"tokens": torch.randn(batch_size, 3 + batch_size, 6), "scale": torch.rand(batch_size, 1, 1)}
