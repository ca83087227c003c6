"""torchao checkpoints under hostile manifests: every mutation is refused or loads with the same answers."""

from __future__ import annotations

from pathlib import Path

import torch

from aitune_core.testing.checkpoint_fuzz import assert_tuned_checkpoint_survives_fuzzing, tune_and_save
from aitune_torchao import TorchAOBackend


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).eval()


def test_fuzzed_torchao_manifests_are_refused_or_load_harmlessly(tmp_path: Path) -> None:
    saved = tune_and_save(build_model, 32, TorchAOBackend(preset="int8wo"), tmp_path, "torchao-fuzz")
    assert_tuned_checkpoint_survives_fuzzing(build_model, saved, tmp_path, rtol=0, atol=0)
