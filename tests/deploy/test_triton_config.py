"""The Triton target's configuration for each artifact format, from descriptions written by hand.

Each ``config.pbtxt`` is parsed into Triton's ``ModelConfig``; what is checked is what
Triton's documentation asks of each format: the loader, batching where the loader does
it, whole shapes where it does not, and the loaders' own parameters from the settings
the artifact was validated with. What Triton cannot take is refused before anything is
written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

from aitune_core.backends.deployable import Deployable, RuntimeOptions, TensorIO
from aitune_core.deploy.options import options_from_text
from aitune_core.deploy.target import DeployError, DeployModel
from aitune_core.deploy.triton.target import TritonOptions, TritonTarget
from aitune_core.testing.triton import read_config

pytest.importorskip("tritonclient.grpc", reason="the configs are parsed by Triton's ModelConfig (tritonclient[grpc])")

FILES = {"onnx": ["model.onnx"], "openvino_ir": ["model.xml", "model.bin"], "aoti_pt2": ["model.pt2"]}


def model(tmp_path: Path, fmt: str, runtime: RuntimeOptions | None = None, **tensors: Any) -> DeployModel:
    source = tmp_path / "artifact"
    source.write_bytes(b"stands for the artifact")
    inputs = tensors.get("inputs", [TensorIO("x", torch.float32, (1, 3), (8, 3), 0)])
    outputs = tensors.get("outputs", [TensorIO("y", torch.float32, (1, 5, 2), (8, 9, 2), 0)])
    deployable = Deployable(
        fmt, dict.fromkeys(FILES[fmt], source), FILES[fmt][0], inputs, outputs, runtime or RuntimeOptions()
    )
    return DeployModel("m", "module", "0", "SomeBackend()", deployable, (1, 2, 4, 8), 1, 8)


def written(tmp_path: Path, deploy: DeployModel, **options: Any) -> tuple[Any, list[str]]:
    notes = TritonTarget(**options).write([deploy], tmp_path / "repo")
    return read_config(tmp_path / "repo" / deploy.name), notes


def test_a_batching_loader_gets_the_tuned_batch_range_and_the_sizes_its_artifact_won(tmp_path: Path) -> None:
    config, notes = written(tmp_path, model(tmp_path, "onnx"), max_queue_delay_us=200)
    assert (config.platform, config.max_batch_size) == ("onnxruntime_onnx", 8)
    assert [list(t.dims) for t in (*config.input, *config.output)] == [[3], [-1, 2]]  # batch left out, ranges -1
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 200
    assert notes == ["m: `y` axis 1 5-9 is -1 in Triton, which checks no range"]


def test_an_aot_package_is_given_whole_shapes_since_its_loader_does_not_batch_yet(tmp_path: Path) -> None:
    config, notes = written(tmp_path, model(tmp_path, "aoti_pt2", RuntimeOptions(threads=3)))
    assert (config.platform, config.backend, config.max_batch_size) == ("torch_aoti", "pytorch", 0)
    assert [list(t.dims) for t in (*config.input, *config.output)] == [[-1, 3], [-1, -1, 2]]
    assert not config.HasField("dynamic_batching")
    assert config.parameters["INTRA_OP_THREAD_COUNT"].string_value == "3"
    assert "m: max_batch_size 0 (Triton's torch_aoti platform does not batch requests yet" in notes[0]


def test_a_tensor_with_no_axis_but_the_batch_is_given_one_and_reshaped(tmp_path: Path) -> None:
    outputs = [TensorIO("score", torch.float32, (1,), (8,), 0), TensorIO("total", torch.float32, (), (), None)]
    config, _ = written(tmp_path, model(tmp_path, "onnx", outputs=outputs))
    assert config.max_batch_size == 0  # `total` has no batch axis: Triton cannot stack requests into it
    score, total = config.output
    assert (list(score.dims), score.HasField("reshape")) == ([-1], False)
    assert (list(total.dims), list(total.reshape.shape), total.HasField("reshape")) == ([1], [], True)

    batched = [TensorIO("score", torch.float32, (1,), (8,), 0)]
    config, _ = written(tmp_path / "batched", model(tmp_path, "onnx", outputs=batched))
    assert (config.max_batch_size, list(config.output[0].dims), list(config.output[0].reshape.shape)) == (8, [1], [])


def test_a_batch_off_the_first_axis_is_left_to_the_client(tmp_path: Path) -> None:
    inputs = [TensorIO("x", torch.float32, (3, 1), (3, 8), 1)]
    config, notes = written(tmp_path, model(tmp_path, "onnx", inputs=inputs))
    assert config.max_batch_size == 0 and [list(t.dims) for t in config.input] == [[3, -1]]
    assert "not every input and output has its batch on the first axis" in notes[0]


def test_the_settings_an_artifact_ran_with_become_its_loaders_parameters(tmp_path: Path) -> None:
    settings = {"provider": "tensorrt", "graph_optimization_level": "basic", "execution_mode": "parallel"}
    runtime = RuntimeOptions(device="cuda", threads=2, precision="fp16", settings=settings)
    config, _ = written(tmp_path / "ort", model(tmp_path, "onnx", runtime), instances=2)
    assert [(group.count, group.kind) for group in config.instance_group] == [(2, 1)]  # KIND_GPU
    assert config.optimization.graph.level == -1
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert (accelerator.name, dict(accelerator.parameters)) == ("tensorrt", {"precision_mode": "FP16"})
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    assert parameters == {"intra_op_thread_count": "2", "execution_mode": "1"}

    runtime = RuntimeOptions(threads=4, precision="bf16", settings={"performance_hint": "throughput"})
    config, _ = written(tmp_path / "ov", model(tmp_path, "openvino_ir", runtime))
    assert config.backend == "openvino" and config.default_model_filename == ""
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    assert parameters == {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_NUM_THREADS": "4", "HINT_BF16": "YES"}


def test_what_triton_cannot_take_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    bf16 = [TensorIO("x", torch.bfloat16, (1, 3), (8, 3), 0)]
    with pytest.raises(DeployError, match="`x` is bfloat16, which Triton's PyTorch backend does not take"):
        TritonTarget().write([model(tmp_path, "aoti_pt2", inputs=bf16)], tmp_path / "repo")
    complex_output = [TensorIO("y", torch.complex64, (1,), (8,), 0)]
    with pytest.raises(DeployError, match=r"`y` is torch\.complex64, which Triton has no data type for"):
        TritonTarget().write([model(tmp_path, "onnx", outputs=complex_output)], tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


@attrs.frozen
class SomeOptions:
    flag: bool = False
    limit: int | None = None
    label: str = ""


def test_command_line_options_are_read_by_the_types_the_target_declares() -> None:
    assert options_from_text(TritonOptions, ["instances=2", "max-queue-delay-us=100"]) == {
        "instances": 2,
        "max_queue_delay_us": 100,
    }
    assert options_from_text(SomeOptions, ["flag=yes", "limit=none", "label=a=b"]) == {
        "flag": True,
        "limit": None,
        "label": "a=b",
    }
    with pytest.raises(ValueError, match="option flag='maybe': not a value of type bool"):
        options_from_text(SomeOptions, ["flag=maybe"])
    with pytest.raises(ValueError, match="its options: flag, label, limit"):
        options_from_text(SomeOptions, ["colour=red"])
    with pytest.raises(ValueError, match="instances must be a whole number of at least 1"):
        TritonOptions(instances=0)
