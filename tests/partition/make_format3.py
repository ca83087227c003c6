"""How ``format3/`` was written: checkpoints of format version 3, made by the code of that version.

Run once, at commit af76146 (the last commit writing format 3), as
``FORMAT3_OUT=tests/partition/format3 pytest tests/partition/make_format3.py``; it is
kept to show what the stored checkpoints hold. Run on later code it would write that
code's format, so it does nothing unless ``FORMAT3_OUT`` is set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from partition_helpers import EngineFileBackend, NestedMaskedBlock, ThreeBlocks, TracedBackend

import aitune_core as ait
from aitune_core.testing.timing import FAST_PROFILE


@pytest.mark.skipif("FORMAT3_OUT" not in os.environ, reason="writes the stored format-3 fixture; see the docstring")
@pytest.mark.parametrize(
    ("folder", "middle", "backend"),
    [("flat", None, TracedBackend), ("nested", NestedMaskedBlock, TracedBackend), ("engine", None, EngineFileBackend)],
)
def test_write(folder: str, middle: type | None, backend: type, traced: Path) -> None:
    out = Path(os.environ["FORMAT3_OUT"]) / folder
    torch.manual_seed(7)
    model = (ThreeBlocks(middle) if middle is not None else ThreeBlocks()).eval()
    module = ait.Module(model, f"format3-{folder}")
    strategy = ait.FirstWinsStrategy([backend()], profile=FAST_PROFILE)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=[1, 2, 4], strategy=strategy, partition=True)
    x = torch.randn(3, 8)
    with torch.no_grad():
        y = module(x)
    ait.save(module, out / "checkpoint")
    torch.save({"x": x, "y": y}, out / "expected.pt")
