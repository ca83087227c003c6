"""export_graph: symbolic axes, names from access paths, both exporters, the fallback and failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnxruntime
import pytest
import torch

from aitune_core.plugin_api import BuildContext
from aitune_core.testing.recording import at_shape, record
from aitune_onnx import ExportConfig, ExportedModel, ExportError, export_graph
from aitune_onnx.dims import read_dims

pytestmark = pytest.mark.slow


def _export(context: BuildContext, folder: Path, **config: Any) -> ExportedModel:
    return export_graph(
        context.module,
        context.graph_spec,
        context.samples,
        context.signature,
        folder / "model.onnx",
        ExportConfig(**config),
    )


def _run_raw(exported: ExportedModel, context: BuildContext, which: str) -> None:
    """Run the file with a plain onnxruntime session (no backend) and compare with eager."""
    session = onnxruntime.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    args, kwargs = at_shape(context, which)
    arguments = context.signature.normalize(args, kwargs)
    feed = {
        name: tensor.numpy()
        for name, tensor in zip(exported.layout.input_names, exported.layout.flatten(arguments), strict=True)
        if name not in exported.unused_inputs
    }
    outputs = session.run(exported.layout.output_names, feed)
    with torch.no_grad():
        expected = context.module(*args, **kwargs)
    actual = exported.layout.rebuild([torch.from_numpy(array) for array in outputs])
    torch.testing.assert_close(_tensors(actual), _tensors(expected), rtol=1e-4, atol=1e-5)


def _tensors(value: Any) -> list[torch.Tensor]:
    from aitune_core.plugin_api import walk_outputs

    return [leaf for _, leaf in walk_outputs(value) if isinstance(leaf, torch.Tensor)]


@pytest.fixture(scope="module")
def tagger_export(tagger_context: BuildContext, tmp_path_factory: pytest.TempPathFactory) -> ExportedModel:
    return _export(tagger_context, tmp_path_factory.mktemp("tagger-export"))


def test_dynamic_batch_and_sequence_are_symbolic(tagger_export: ExportedModel) -> None:
    inputs, outputs = read_dims(onnx.load(str(tagger_export.path)))
    assert inputs == {"tokens": ["batch", "tokens_dim1", 8], "mask": ["batch", "tokens_dim1"]}
    assert outputs == {"output": ["batch", "tokens_dim1", 8]}
    assert tagger_export.exporter == "dynamo" and not tagger_export.fallback_reason
    assert tagger_export.dynamic_axes["tokens"] == {0: "batch", 1: "tokens_dim1"}
    assert tagger_export.shape_inference == "ok"
    assert tagger_export.external_data is None and tagger_export.files == [tagger_export.path]


@pytest.mark.parametrize("which", ["min", "max"])
def test_ort_runs_at_the_extremes(tagger_export: ExportedModel, tagger_context: BuildContext, which: str) -> None:
    _run_raw(tagger_export, tagger_context, which)


def test_names_follow_access_paths_with_nesting(nested_context: BuildContext, tmp_path: Path) -> None:
    exported = _export(nested_context, tmp_path)
    assert exported.input_names == {"values[0]": "values_0", 'values[1]["pairs"]': "values_1_pairs"}
    assert exported.output_names == {
        'output["hidden"]': "output_hidden",
        'output["extra"][0]': "output_extra_0",
        'output["extra"][1]': "output_extra_1",
    }
    model = onnx.load(str(exported.path))
    assert [value.name for value in model.graph.input] == ["values_0", "values_1_pairs"]
    assert [value.name for value in model.graph.output] == ["output_hidden", "output_extra_0", "output_extra_1"]
    # y holds two rows per sample: a derived dim of the one shared batch dim.
    assert exported.dynamic_axes["values_1_pairs"] == {0: "2*batch"}
    assert exported.dynamic_axes["values_0"] == {0: "batch"}
    # `double=True` was recorded, so it is baked in; the string output stays in the template.
    assert [(locator.display_path, value) for locator, value in exported.layout.constants] == [("double", True)]
    for which in ("min", "opt", "max"):
        _run_raw(exported, nested_context, which)


def test_torchscript_exporter_can_be_chosen(
    tagger_context: BuildContext, nested_context: BuildContext, tmp_path: Path
) -> None:
    tagger = _export(tagger_context, tmp_path / "tagger", exporter="torchscript")
    assert tagger.exporter == "torchscript"
    assert tagger.dynamic_axes["tokens"] == {0: "batch", 1: "tokens_dim1"}
    assert tagger.dynamic_axes["mask"] == {0: "batch", 1: "mask_dim1"}
    nested = _export(nested_context, tmp_path / "nested", exporter="torchscript")
    assert nested.dynamic_axes["values_1_pairs"] == {0: "2*batch"}
    for which in ("min", "max"):
        _run_raw(tagger, tagger_context, which)
        _run_raw(nested, nested_context, which)


class Branchy(torch.nn.Module):
    """Python control flow on a tensor's value: torch.export cannot capture it, tracing can."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.proj(x)
        return -x


def test_torchscript_fallback_when_dynamo_fails(tmp_path: Path) -> None:
    context = record(Branchy(), lambda b: ((torch.rand(b, 4),), {}), (2, 4), tmp_path / "cache")
    exported = _export(context, tmp_path)
    assert exported.exporter == "torchscript"
    assert exported.fallback_reason.startswith("dynamo exporter raised")
    assert exported.dynamic_axes["x"] == {0: "batch"}
    _run_raw(exported, context, "min")
    with pytest.raises(ExportError, match="dynamo exporter raised") as raised:
        _export(context, tmp_path / "no-fallback", torchscript_fallback=False)
    assert [exporter for exporter, _ in raised.value.failures] == ["dynamo"]


@torch.library.custom_op("aitune_onnx_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Mysterious(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mystery(x) + 1


def test_export_failure_names_the_exporters_and_the_op(tmp_path: Path) -> None:
    context = record(Mysterious(), lambda b: ((torch.randn(b, 4),), {}), (2, 4), tmp_path / "cache")
    with pytest.raises(ExportError) as raised:
        _export(context, tmp_path)
    error = raised.value
    assert error.unsupported_op == "aitune_onnx_test.mystery.default"
    assert [exporter for exporter, _ in error.failures] == ["dynamo", "torchscript"]
    message = str(error)
    assert "dynamo exporter raised ConversionError" in message
    assert "No ONNX function found" in message
    assert "torchscript exporter raised" in message and "aitune_onnx_test::mystery" in message
    assert message.endswith("First unsupported operator: aitune_onnx_test.mystery.default")
    assert not list(tmp_path.glob("*.onnx*")), "a failed export leaves no file behind"


def test_external_data_in_one_file(mlp_context: BuildContext, tmp_path: Path) -> None:
    exported = _export(mlp_context, tmp_path, external_data="always")
    assert exported.external_data == tmp_path / "model.onnx.data"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    weights = {t.name: t for t in onnx.load(str(exported.path), load_external_data=False).graph.initializer}
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in weights.values())
    onnx.checker.check_model(str(exported.path))
    _run_raw(exported, mlp_context, "max")
    converted = _export(mlp_context, tmp_path / "ts", exporter="torchscript", external_data="always")
    assert converted.external_data is not None and converted.external_data.is_file()
    _run_raw(converted, mlp_context, "min")


def test_data_dependent_outputs_are_reported(positive_context: BuildContext, tmp_path: Path) -> None:
    exported = _export(positive_context, tmp_path)
    assert exported.data_dependent_outputs == ["output_0"]
    assert exported.dynamic_axes["output_1"] == {0: "batch"}
