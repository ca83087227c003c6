"""Precision plans for each TensorRT generation, tolerances, and the strongly typed export."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

from aitune_core.plugin_api import BuildContext, Locator
from aitune_core.testing.models import Nested
from aitune_onnx import export_graph
from aitune_trt.precision import Capabilities, CastModule, PrecisionError, PrecisionPlan, plan_precision, tolerances_for
from aitune_trt.testing import TENSORRT_10, TENSORRT_11

TENSORRT_8_6 = Capabilities("8.6.1", frozenset({"FP16", "TF32"}), frozenset({"EXPLICIT_BATCH"}))


def test_fp32_on_tensorrt_10_turns_tf32_off_unless_asked() -> None:
    assert plan_precision("fp32", None, False, TENSORRT_10) == PrecisionPlan("fp32", False, clear_flags=("TF32",))
    assert plan_precision("fp32", None, True, TENSORRT_10) == PrecisionPlan("fp32", False, set_flags=("TF32",))
    assert plan_precision("fp32", True, False, TENSORRT_10).strongly_typed


def test_half_precision_uses_builder_flags_where_tensorrt_has_them() -> None:
    fp16 = plan_precision("fp16", None, False, TENSORRT_10)
    assert fp16 == PrecisionPlan("fp16", False, set_flags=("FP16",), clear_flags=("TF32",))
    assert fp16.export_dtype is None
    bf16 = plan_precision("bf16", None, True, TENSORRT_10)
    assert bf16.set_flags == ("BF16", "TF32") and not bf16.strongly_typed


def test_strong_typing_exports_the_model_in_the_precision() -> None:
    plan = plan_precision("fp16", True, False, TENSORRT_10)
    assert plan.strongly_typed and plan.set_flags == () and plan.export_dtype is torch.float16
    assert plan.describe() == "fp16 (strongly typed, exported in float16)"


def test_tensorrt_11_is_always_strongly_typed() -> None:
    assert plan_precision("fp32", None, False, TENSORRT_11).strongly_typed
    bf16 = plan_precision("bf16", None, False, TENSORRT_11)
    assert bf16.strongly_typed and bf16.export_dtype is torch.bfloat16 and "BF16" not in bf16.set_flags
    with pytest.raises(PrecisionError, match="builds every network strongly typed"):
        plan_precision("fp16", False, False, TENSORRT_11)


def test_tensorrt_8_6_has_fp16_flags_but_neither_bf16_nor_strong_typing() -> None:
    assert plan_precision("fp16", None, False, TENSORRT_8_6).set_flags == ("FP16",)
    with pytest.raises(PrecisionError, match=r"neither BuilderFlag\.BF16 nor strongly typed networks"):
        plan_precision("bf16", None, False, TENSORRT_8_6)
    with pytest.raises(PrecisionError, match="has no strongly typed networks"):
        plan_precision("fp32", True, False, TENSORRT_8_6)


def test_weak_typing_without_the_flag_is_refused() -> None:
    with pytest.raises(PrecisionError, match=r"has no BuilderFlag\.BF16"):
        plan_precision("bf16", False, False, TENSORRT_8_6)
    with pytest.raises(PrecisionError, match="precision must be one of fp32, fp16, bf16"):
        plan_precision("int8", None, False, TENSORRT_10)


def test_tolerances_widen_with_the_precision() -> None:
    assert tolerances_for("fp32", False).for_dtype(torch.float32).atol == 1e-4
    assert tolerances_for("fp32", True).for_dtype(torch.float32).atol == 5e-3
    assert tolerances_for("fp16", False).for_dtype(torch.float32).rtol == 1e-2
    assert tolerances_for("bf16", False).for_dtype(torch.float32).rtol == 5e-2


def test_cast_module_keeps_the_recorded_dtypes_at_its_edges() -> None:
    model = Nested().eval()
    dtypes = {Locator(None).child("hidden", "key"): torch.float32}
    cast = CastModule(model, torch.bfloat16, dtypes)
    x, pairs = torch.randn(2, 8), torch.randn(4, 3)
    out = cast((x, {"pairs": pairs}))
    assert out["hidden"].dtype == torch.float32  # cast back, as recorded
    assert out["extra"][0].dtype == torch.bfloat16  # not in the recorded dtypes: left as computed
    assert model.proj.weight.dtype == torch.float32, "the user's module must not be cast"
    torch.testing.assert_close(out["hidden"], model((x, {"pairs": pairs}))["hidden"], atol=5e-2, rtol=5e-2)


@pytest.mark.slow
def test_a_strongly_typed_export_computes_in_half_and_keeps_float32_io(
    mlp_context: BuildContext, tmp_path: Path
) -> None:
    dtypes = {locator: spec.dtype for locator, spec in mlp_context.graph_spec.output_spec.tensor_data}
    module = CastModule(mlp_context.module, torch.float16, dtypes)
    exported = export_graph(
        module, mlp_context.graph_spec, mlp_context.samples, mlp_context.signature, tmp_path / "model.onnx"
    )
    model = onnx.load(str(exported.path))
    float32, float16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
    assert [value.type.tensor_type.elem_type for value in model.graph.input] == [float32]
    assert [value.type.tensor_type.elem_type for value in model.graph.output] == [float32]
    assert {tensor.data_type for tensor in model.graph.initializer if len(tensor.dims) == 2} == {float16}
    assert "Cast" in {node.op_type for node in model.graph.node}
