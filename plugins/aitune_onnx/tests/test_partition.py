"""Partitioning with a real exporter: the block deciding on its data stays eager, its neighbours run on ONNX Runtime."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.testing.timing import FAST_PROFILE, steady_timer
from aitune_onnx import ONNXRuntimeBackend

pytestmark = pytest.mark.slow

_names = itertools.count()


class Branching(nn.Module):
    """``.item()`` then ``if``: no exporter can take it; a mask (``nonzero``) alone would export fine."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 16) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight
        if y.sum().item() > 0:
            return y * 2
        return -y


class ThreeBlocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block1 = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.block2 = Branching()
        self.block3 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block3(self.block2(self.block1(x)))


def test_the_data_dependent_block_stays_eager_and_its_neighbours_run_on_onnx() -> None:
    ait.config.timer = steady_timer()  # which candidate serves must not depend on the machine's load
    model = ThreeBlocks().eval()
    wrapped = ait.Module(model, f"onnx-partition-{next(_names)}")
    strategy = ait.FirstWinsStrategy([ONNXRuntimeBackend()], profile=FAST_PROFILE)
    data = [torch.randn(8) for _ in range(4)]
    report = ait.tune(wrapped, data, batch_sizes=[1, 4], strategy=strategy, partition=True)
    whole = report.graphs[0].candidates[0]
    assert whole.status == "skipped" and whole.stage == "declined", whole
    assert whole.reason.startswith("data-dependent control flow"), whole
    (route,) = wrapped.routes.values()
    tree = {node.path: node.serves for node in route.backend.tree()}
    assert tree["block1"] == tree["block3"] == "ONNXRuntimeBackend()", tree
    assert tree["block2"].startswith("eager (declined: data-dependent control flow"), tree
    assert "graph 0: partitioned" in str(report)
    for batch in (1, 3, 4):
        x = torch.randn(batch, 8)
        with torch.no_grad():
            torch.testing.assert_close(wrapped(x), model(x), rtol=1e-4, atol=1e-5)
