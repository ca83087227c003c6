"""aitune's conformance suite: the default backend on an MLP, and the TorchScript exporter on nested calls."""

from __future__ import annotations

from typing import Any

import torch

from aitune_core.testing import BackendConformance
from aitune_onnx import ONNXRuntimeBackend


class TestONNXRuntimeConformance(BackendConformance):
    batch_sizes = (2, 4, 8)
    rtol, atol = 1e-4, 1e-5

    def make_backend(self) -> ONNXRuntimeBackend:
        return ONNXRuntimeBackend()

    def make_other_backend(self) -> ONNXRuntimeBackend:
        return ONNXRuntimeBackend(graph_optimization_level="basic", intra_op_num_threads=1)


class NestedModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, inputs: dict[str, torch.Tensor], scale: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
        hidden = torch.relu(self.proj(inputs["x"])) * scale
        return hidden, [hidden.sum(dim=1), inputs["y"] * 2]


class TestTorchScriptNestedConformance(BackendConformance):
    """Nested calls through the TorchScript exporter, whose exports take milliseconds."""

    batch_sizes = (2, 3, 6)
    rtol, atol = 1e-4, 1e-5

    def make_backend(self) -> ONNXRuntimeBackend:
        return ONNXRuntimeBackend(exporter="torchscript")

    def make_other_backend(self) -> ONNXRuntimeBackend:
        return ONNXRuntimeBackend(exporter="torchscript", opset_version=17)

    def make_model(self) -> torch.nn.Module:
        return NestedModel()

    def make_inputs(self, batch_size: int) -> Any:
        return {"inputs": {"x": torch.randn(batch_size, 8), "y": torch.randn(batch_size, 5, 2)}, "scale": 0.5}
