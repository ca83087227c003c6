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


def test_cuda_calls_are_timed_on_the_device_and_host_stalls_show_as_disturbed() -> None:
    """Device time between events, and the host's CPU share: a host-side stall (the thread sleeping, as a
    preempted one would) lowers the share, so the round is retaken rather than counted."""
    import time

    from aitune_core.profiling.interference import disturbed_rounds
    from aitune_core.profiling.timer import WallClock
    from aitune_core.validation.inputs import CallInputs

    x = torch.randn(1024, 1024, device="cuda")
    call = CallInputs("cuda", (x,), {})
    clock = WallClock()
    clock.warm("mm", torch.mm, CallInputs("cuda", (x, x), {}), 3)
    quiet = [clock.time_round("mm", lambda a: a @ a, call, 1, 4) for _ in range(6)]
    stalled = clock.time_round("mm", lambda a: (time.sleep(0.02), a @ a)[1], call, 1, 4)
    assert all(t > 0 for r in quiet for t in r.latencies)
    shares = {"mm": {i: r.cpu_share for i, r in enumerate([*quiet, stalled])}}
    assert set(disturbed_rounds(shares, threshold=0.85)) == {len(quiet)}
