"""``aitune inspect`` says when a JIT graph is rebuilt: at load from its samples, or on its first call."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import aitune_core as ait
from aitune_core.backends import TorchEagerBackend
from aitune_core.checkpoint.inspect import describe_checkpoint
from aitune_core.strategies import FirstWinsStrategy


class Options:
    """An object the checkpoint cannot store as data: the graph's samples are not saved."""

    scale = 2.0


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, options: Options | None = None) -> torch.Tensor:
        return self.proj(x) * (options.scale if options is not None else 1.0)


def test_inspect_tells_apart_graphs_rebuilt_at_load_and_on_first_call(unique_name, tmp_path: Path):
    model = Scaled().eval()
    module = ait.Module(model, unique_name("scaled"))
    options = Options()

    def run(x: torch.Tensor) -> torch.Tensor:
        return module(x) + module(x, options)

    strategy = FirstWinsStrategy([TorchEagerBackend()])
    ait.tune(run, [torch.randn(4) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy)
    ait.save(module, tmp_path / "ckpt")
    text = describe_checkpoint(tmp_path / "ckpt")
    at_load = next(line for line in text.splitlines() if "compiled again at load" in line)
    first_call = next(line for line in text.splitlines() if "compiled on the first call after load" in line)
    plain, with_options = sorted(g.name for g in module.graph_specs)
    assert f"/{plain}:" in at_load and f"/{with_options}:" not in at_load
    assert f"/{with_options}:" in first_call
