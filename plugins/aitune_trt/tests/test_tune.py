"""tune() with the default candidates on a machine without TensorRT: it runs, and says why TensorRT was skipped."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.models import TinyMLP
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_trt import TensorRTBackend


@pytest.mark.skipif(
    TensorRTBackend.availability("cpu").available, reason="this machine has TensorRT and CUDA; nothing is skipped"
)
def test_default_candidates_skip_tensorrt_with_the_reason(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-trt", entry_points={"tensorrt": "aitune_trt.plugin"}))
    model = TinyMLP().eval()
    wrapped = ait.Module(model, "trt-default-candidates")
    report = ait.tune(
        wrapped,
        [torch.randn(8) for _ in range(8)],
        batch_sizes=[2, 4],
        strategy=ait.MaxThroughputStrategy(profile=SHORT_PROFILE),
    )
    (graph,) = report.graphs
    skipped, *others = graph.candidates
    assert skipped.backend == "TensorRTBackend()" and skipped.status == "skipped"
    assert skipped.reason == TensorRTBackend.availability("cpu").reason
    assert "tensorrt not importable" in skipped.reason or "no CUDA device" in skipped.reason
    assert [c.backend for c in others] == ["TorchEagerBackend()"]
    assert graph.selected is not None and graph.selected.backend == "TorchEagerBackend()"
    assert "TensorRTBackend()" in str(report) and "skipped" in str(report)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x))
