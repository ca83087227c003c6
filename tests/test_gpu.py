"""The core on a CUDA device: tuning, autocast, routing and loading a checkpoint onto the GPU.

Skipped without CUDA (``scripts/gpu_check.sh`` runs these on a GPU machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import aitune_core as ait

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

FAST = ait.ProfileConfig(warmup_iterations=2, min_time_s=0.01, max_time_s=0.05, max_batch_search_time_s=1.0)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).eval()


def test_tune_on_cuda_with_autocast_candidates(unique_name, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ait.config.cache_dir = tmp_path
    model = mlp().cuda()
    module = ait.Module(model, unique_name("cuda-mlp"))
    strategy = ait.MaxThroughputStrategy(
        [ait.TorchEagerBackend(autocast_enabled=True, autocast_dtype=torch.float16), ait.TorchEagerBackend()],
        profile=FAST,
        tolerances=ait.Tolerances.uniform(atol=2e-2, rtol=2e-2),
    )
    report = ait.tune(
        module, [torch.randn(256) for _ in range(8)], batch_sizes=[1, 4, 16], device="cuda", strategy=strategy
    )
    assert report.graphs[0].selected is not None
    x = torch.randn(8, 256, device="cuda")
    out = module(x)
    assert out.is_cuda and out.dtype == torch.float32
    torch.testing.assert_close(out, model(x), atol=2e-2, rtol=2e-2)


def test_checkpoint_loads_onto_cuda(unique_name, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ait.config.cache_dir = tmp_path / "cache"
    top = ait.Module(mlp(), unique_name("to-cuda"))
    ait.tune(
        top,
        [torch.randn(256) for _ in range(4)],
        batch_sizes=[1, 2],
        device="cpu",
        strategy=ait.FirstWinsStrategy([ait.TorchEagerBackend()], profile=FAST),
    )
    path = ait.save(top, tmp_path / "ckpt")
    x = torch.randn(2, 256)
    expected = top(x)
    del top
    restored = ait.load(mlp(), path, device_map="cuda")
    out = restored(x.cuda())
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), expected, atol=1e-4, rtol=1e-4)
