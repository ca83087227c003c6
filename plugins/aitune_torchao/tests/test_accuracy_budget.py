"""torchao int8 under an accuracy budget: the tolerant modules are quantized, the sensitive one stays exact.

The model is a stack of four wrapped blocks whose weights int8 represents well (one
large weight per row at most, each near the diagonal), except block 1: every row of
it also has a weight of 1000 on an input that is always zero. Eager never sees that
weight, but per-row int8 scales by it, so every other weight of the row rounds to zero
and quantizing block 1 alone zeroes the logits. The timings are scripted
(``steady_timer``: every candidate twice as fast as eager), so no verdict depends on
the machine.
"""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.testing.child_process import env_with_sources
from aitune_torchao import TorchAOBackend

pytestmark = pytest.mark.usefixtures("aitune_one_thread")  # timings must not depend on the other core

WIDTH, CLASSES = 32, 8
_runs = itertools.count()


def block(weight: torch.Tensor, relu: bool = True) -> nn.Sequential:
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        linear.weight.copy_(weight)
    return nn.Sequential(linear, nn.ReLU()) if relu else nn.Sequential(linear)


def near_identity(rows: int, columns: int) -> torch.Tensor:
    weight = torch.eye(rows, columns) + 0.01 * torch.randn(rows, columns)
    weight[:, -1] = 0.0
    if rows == columns:
        weight[-1] = 0.0  # the last feature is always zero after this block
    return weight


def stack() -> nn.Sequential:
    torch.manual_seed(0)
    sensitive = near_identity(WIDTH, WIDTH)
    sensitive[:, -1] = 1000.0  # on the dead feature: nothing in eager, everything for int8's row scale
    blocks = [
        block(near_identity(WIDTH, WIDTH)),
        block(sensitive),
        block(near_identity(WIDTH, WIDTH)),
        block(near_identity(CLASSES, WIDTH), relu=False),
    ]
    return nn.Sequential(*blocks).eval()


def wrapped(model: nn.Sequential) -> tuple[nn.Sequential, list[ait.Module]]:
    run = next(_runs)
    strategy = ait.MaxThroughputStrategy(backends=[TorchAOBackend(preset="int8wo")])
    modules = [ait.Module(child, f"block{index}-{run}", strategy=strategy) for index, child in enumerate(model)]
    return nn.Sequential(*modules).eval(), modules


def samples(count: int) -> list[torch.Tensor]:
    """Each sample is its class's direction plus small positive noise: eager's top-1 is clear."""
    classes = torch.arange(count) % CLASSES
    return [torch.nn.functional.one_hot(c, WIDTH).float() + 0.05 * torch.rand(WIDTH) for c in classes]


def test_int8_serves_the_tolerant_blocks_and_the_sensitive_one_stays_exact() -> None:
    reference = stack()
    model, modules = wrapped(stack())
    budget = ait.AccuracyBudget(ait.metrics.top1_agreement, 0.01)
    report = ait.tune(model, samples(40), batch_sizes=[4, 8], accuracy=budget)
    accuracy = report.accuracy
    assert accuracy is not None
    served = [type(m.backends["0"]).__name__ for m in modules]
    assert served == ["TorchAOBackend", "TorchEagerBackend", "TorchAOBackend", "TorchAOBackend"]
    sensitivity = {row.module.split("-")[0]: row for row in accuracy.sensitivities}
    assert sensitivity["block1"].drop is not None and sensitivity["block1"].drop > 0.5
    assert not sensitivity["block1"].chosen and all(sensitivity[f"block{i}"].chosen for i in (0, 2, 3))
    assert accuracy.final_drop is not None and accuracy.final_drop <= 0.01
    assert [m.split("-")[0] for m in accuracy.chosen] == ["block0", "block2", "block3"]
    # On fresh data too: the quantized pipeline agrees with eager's top-1, and the model kept its weights.
    fresh = torch.stack(samples(64)) + 0.01 * torch.rand(64, WIDTH)
    with torch.no_grad():
        assert ait.metrics.top1_agreement(model(fresh), reference(fresh)) >= 0.99
    for mine, theirs in zip(model, reference, strict=True):
        assert torch.equal(mine.module[0].weight, theirs[0].weight)


def test_the_checkpoint_keeps_the_budget_and_refuses_choices_no_longer_declared_lossy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, modules = wrapped(stack())
    ait.tune(model, samples(40), batch_sizes=[4, 8], accuracy=ait.AccuracyBudget(ait.metrics.top1_agreement, 0.01))
    path = ait.save(model, tmp_path / "budgeted")
    shown = subprocess.run(
        [sys.executable, "-m", "aitune_core.cli", "inspect", str(path)],
        capture_output=True,
        text=True,
        env=env_with_sources("aitune_torchao"),
        timeout=120,
        check=True,
    ).stdout
    assert "accuracy budget: ait.metrics.top1_agreement may drop by at most 0.01" in shown
    assert "lossy here: graph 0: TorchAOBackend(preset='int8wo')" in shown and "held-out data" in shown

    x = torch.stack(samples(8))
    with torch.no_grad():
        expected = model(x)
    tuned = [m.accuracy for m in modules]
    del model, modules
    gc.collect()  # names are unique while their wrappers live; loading wraps the plain stack under them

    loaded = ait.load(stack(), path)
    records = [m.accuracy for m in loaded]
    assert records == tuned and all(r.metric == "ait.metrics.top1_agreement" for r in records)
    assert [len(r.lossy) for r in records] == [1, 0, 1, 1]
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), expected)
    del loaded
    gc.collect()

    monkeypatch.setattr(TorchAOBackend, "lossy", property(lambda self: False))
    with pytest.raises(ait.CheckpointError, match="declares it exact") as refused:
        ait.load(stack(), path)
    assert "tune again with tune(..., accuracy=...)" in str(refused.value)
