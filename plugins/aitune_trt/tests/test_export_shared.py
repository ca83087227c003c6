"""TensorRT and ONNX Runtime candidates on one graph export it once; a cast export is another model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

import aitune_onnx.export_cache as export_cache
from aitune_core.plugin_api import BuildContext
from aitune_onnx import ONNXRuntimeBackend
from aitune_trt.testing import TENSORRT_11, OrtTensorRTBackend

pytestmark = pytest.mark.slow


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The modules ``export_graph`` exported, in order: one per export that ran."""
    calls: list[Any] = []
    real = export_cache.export_graph

    def counting(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        calls.append(module)
        return real(module, *args, **kwargs)

    monkeypatch.setattr(export_cache, "export_graph", counting)
    return calls


def _in_build_folder(context: BuildContext, cache: Path, build: str) -> BuildContext:
    return attrs.evolve(context, cache_dir=cache / "builds" / "identity" / build)


def test_onnx_runtime_and_tensorrt_share_the_export(
    mlp_context: BuildContext, tmp_path: Path, exports: list[Any]
) -> None:
    onnx_runtime = ONNXRuntimeBackend().build(_in_build_folder(mlp_context, tmp_path, "ort"))
    tensorrt = OrtTensorRTBackend().build(_in_build_folder(mlp_context, tmp_path, "trt"))
    assert len(exports) == 1
    assert "export_reused" not in onnx_runtime.build_info
    assert tensorrt.build_info["export_reused"].startswith(str(tmp_path / "exports"))
    assert OrtTensorRTBackend.plans_built == 1  # the engine is still built from the shared export
    x = torch.randn(3, 8)
    with torch.no_grad():
        expected = mlp_context.module(x)
    torch.testing.assert_close(tensorrt(x), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(onnx_runtime(x), expected, rtol=1e-4, atol=1e-5)


def test_a_half_precision_export_is_not_shared_with_the_float_one(
    mlp_context: BuildContext, tmp_path: Path, exports: list[Any]
) -> None:
    class TensorRT11(OrtTensorRTBackend):
        capabilities = TENSORRT_11

    ONNXRuntimeBackend().build(_in_build_folder(mlp_context, tmp_path, "ort"))
    half = TensorRT11(precision="fp16").build(_in_build_folder(mlp_context, tmp_path, "trt"))
    assert len(exports) == 2
    assert "export_reused" not in half.build_info
