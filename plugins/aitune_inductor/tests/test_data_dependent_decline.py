"""AOT Inductor declines a graph that decides in Python on its data, before exporting anything."""

from __future__ import annotations

import itertools

import torch
from torch import nn

import aitune_core as ait
from aitune_core.testing.timing import FAST_PROFILE
from aitune_inductor import TorchInductorAotBackend

_names = itertools.count()


class Branching(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum().item() > 0:
            return x * 2
        return -x


def test_a_python_decision_on_the_data_is_declined_before_export() -> None:
    wrapped = ait.Module(Branching().eval(), f"aot-decline-{next(_names)}")
    strategy = ait.FirstWinsStrategy([TorchInductorAotBackend()], profile=FAST_PROFILE)
    report = ait.tune(wrapped, [torch.randn(4) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy)
    aot = report.graphs[0].candidates[0]
    assert aot.status == "skipped" and aot.stage == "declined", aot
    assert aot.reason == "data-dependent control flow: a Python decision on a tensor's value (aten._local_scalar_dense)"
    assert aot.build_s == 0.0  # nothing was exported or compiled
    x = torch.randn(3, 4)
    torch.testing.assert_close(wrapped(x), wrapped.module(x))
