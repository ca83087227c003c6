"""Telling, from one fake run, whether a forward depends on its data, and which op makes it so."""

from __future__ import annotations

import pytest
import torch
from partition_helpers import Block1, BranchingBlock, MaskedBlock
from torch import nn

from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import Sample
from aitune_core.validation.data_dependent import DataDependence, find_data_dependence

CPU = torch.device("cpu")


def found(module: nn.Module, symbolic: bool = False, width: int = 16) -> DataDependence | None:
    sample = Sample({"x": torch.randn(3, width)}, 3)
    return find_data_dependence(module.eval(), ForwardSignature(module.forward), sample, CPU, symbolic)


def test_a_mask_is_a_data_dependent_output_shape() -> None:
    result = found(MaskedBlock())
    assert result == DataDependence("output shape", "aten.nonzero")
    assert result.reason == "data-dependent output shape: aten.nonzero"


def test_exporters_take_a_data_dependent_size_but_not_a_decision_on_the_data() -> None:
    assert found(MaskedBlock(), symbolic=True) is None
    assert found(BranchingBlock()) == DataDependence("value", "aten._local_scalar_dense")
    decided = found(BranchingBlock(), symbolic=True)
    assert decided is not None and decided.kind == "control flow"
    assert (
        decided.reason
        == "data-dependent control flow: a Python decision on a tensor's value (aten._local_scalar_dense)"
    )
    assert "partition=True" in decided.hint


@pytest.mark.parametrize("symbolic", [False, True])
def test_a_forward_on_shapes_alone_is_fine(symbolic: bool) -> None:
    assert found(Block1(), symbolic, width=8) is None


def test_the_fake_run_changes_neither_the_sample_nor_the_module() -> None:
    class InPlace(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return x[x > 1]

    module = InPlace().eval()
    sample = Sample({"x": torch.randn(3, 4)}, 3)
    kept = sample.arguments["x"].clone()
    assert find_data_dependence(module, ForwardSignature(module.forward), sample, CPU) is not None
    assert torch.equal(sample.arguments["x"], kept) and module.count.item() == 0


def test_what_cannot_run_on_fake_tensors_is_not_declined() -> None:
    class ToNumpy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(x.numpy() * 2)

    assert found(ToNumpy()) is None
