"""ONNX Runtime checkpoints under hostile manifests: every mutation is refused or loads with the same answers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aitune_core.testing.checkpoint_fuzz import assert_tuned_checkpoint_survives_fuzzing, tune_and_save
from aitune_onnx import ONNXRuntimeBackend


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()


@pytest.mark.parametrize("external_data", ["never", "always"])
def test_fuzzed_onnx_manifests_are_refused_or_load_harmlessly(tmp_path: Path, external_data: str) -> None:
    backend = ONNXRuntimeBackend(external_data=external_data)
    saved = tune_and_save(build_model, 8, backend, tmp_path, f"onnx-fuzz-{external_data}")
    assert_tuned_checkpoint_survives_fuzzing(build_model, saved, tmp_path, rtol=1e-5, atol=1e-5)
