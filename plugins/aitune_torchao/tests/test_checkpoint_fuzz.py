"""torchao checkpoints under hostile manifests: every mutation is refused or loads with the same answers."""

from __future__ import annotations

from pathlib import Path

import torch

import aitune_core as ait
from aitune_core.config import config
from aitune_core.profiling import ProfileConfig
from aitune_core.testing.checkpoint_fuzz import Canaries, assert_hostile_manifests_are_safe
from aitune_torchao import TorchAOBackend

FAST = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.001, max_time_s=0.01, max_batch_search=False)


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).eval()


def test_fuzzed_torchao_manifests_are_refused_or_load_harmlessly(tmp_path: Path) -> None:
    config.cache_dir = tmp_path / "cache"
    module = ait.Module(build_model(), "torchao-fuzz")
    strategy = ait.FirstWinsStrategy([TorchAOBackend(preset="int8wo")], profile=FAST)
    ait.tune(
        module,
        [torch.randn(32) for _ in range(4)],
        batch_sizes=[1, 4],
        strategy=strategy.enable_performance_validation(False),
    )
    path = ait.save(module, tmp_path / "ckpt")
    x = torch.randn(3, 32)
    with torch.no_grad():
        y = module(x)
    del module

    def same_answers(model: torch.nn.Module) -> None:
        torch.testing.assert_close(model(x), y, rtol=0, atol=0)

    report = assert_hostile_manifests_are_safe(
        build_model, path, Canaries.make(tmp_path / "canaries"), same_answers, tmp_path
    )
    assert report.refused > report.cases // 2
    assert "modules[].graphs[].backend.name" not in report.accepted
