"""Both Inductor backends on a CUDA device (skipped without one; scripts/gpu_check.sh runs them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_inductor import TorchInductorAotBackend, TorchInductorJitBackend

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("backend", [TorchInductorJitBackend(), TorchInductorAotBackend()], ids=["jit", "aot"])
def test_tunes_on_cuda_and_matches_eager(backend: ait.Backend, tmp_path: Path) -> None:
    ait.config.cache_dir = tmp_path
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).eval().cuda()
    module = ait.Module(model, f"cuda-{backend.name}")
    try:
        strategy = ait.FirstWinsStrategy([backend]).enable_performance_validation(False)
        report = ait.tune(
            module, [torch.randn(64) for _ in range(8)], batch_sizes=[1, 8, 32], device="cuda", strategy=strategy
        )
        assert report.graphs[0].candidates[0].status == "selected", report.graphs[0].candidates[0].reason
        for batch in (1, 5, 32):
            x = torch.randn(batch, 64, device="cuda")
            with torch.no_grad():
                torch.testing.assert_close(module(x), model(x), atol=1e-4, rtol=1e-3)
    finally:
        ait.config.reset()
        del module
