"""One model's ``config.pbtxt``, from its artifact's description and what tuning measured.

Per format, the platform or backend Triton loads it with, from Triton's documentation:

* ONNX: ``platform: "onnxruntime_onnx"``; threads, execution mode and graph
  optimization level as the ONNX Runtime backend's parameters and ``optimization.graph``;
  the TensorRT execution provider as a GPU execution accelerator.
* OpenVINO IR: ``backend: "openvino"``; ``PERFORMANCE_HINT``, ``INFERENCE_NUM_THREADS``
  and ``HINT_BF16`` as its parameters.
* AOT Inductor ``.pt2`` (Triton 26.03 and later): ``platform: "torch_aoti"`` with
  ``backend: "pytorch"``; inputs named ``ARGS[i]`` / ``KWARGS[name]``, outputs ``RESULT``...;
  ``INTRA_OP_THREAD_COUNT`` as its parameter. The backend's README says batching (batch
  sizes above 1 formed by Triton) is not complete for these models, so they get
  ``max_batch_size: 0``: each request carries its own batch, in the tensor's first axis.
* TensorRT plan: ``platform: "tensorrt_plan"``; every optimization profile of the
  engine offered to the instance group.

Batching: where every input and output has its batch on its first axis and the graph
had a batch range, ``max_batch_size`` is the range's top, ``dims`` leave the batch
axis out, and ``dynamic_batching`` prefers the batch sizes where this artifact won.
Otherwise ``max_batch_size`` is 0 and ``dims`` are whole shapes. An axis whose size
varies is ``-1``: Triton keeps no range, so a request beyond the tuned range reaches
the runtime unvalidated (the summary says which axes).
"""

from __future__ import annotations

from typing import Any

import torch

from aitune_core.backends.deployable import TensorIO
from aitune_core.deploy.target import DeployModel
from aitune_core.deploy.triton.pbtxt import Enum

TYPES = {
    torch.bool: "TYPE_BOOL",
    torch.uint8: "TYPE_UINT8",
    torch.int8: "TYPE_INT8",
    torch.int16: "TYPE_INT16",
    torch.int32: "TYPE_INT32",
    torch.int64: "TYPE_INT64",
    torch.float16: "TYPE_FP16",
    torch.float32: "TYPE_FP32",
    torch.float64: "TYPE_FP64",
    torch.bfloat16: "TYPE_BF16",
}
"""torch dtypes and Triton's data types (its model configuration's table)."""
LOADERS: dict[str, dict[str, str]] = {
    "onnx": {"platform": "onnxruntime_onnx"},
    "openvino_ir": {"backend": "openvino"},
    "aoti_pt2": {"platform": "torch_aoti", "backend": "pytorch"},
    "tensorrt_plan": {"platform": "tensorrt_plan"},
}
DEFAULT_FILES = {
    "onnx": "model.onnx",
    "openvino_ir": "model.xml",
    "aoti_pt2": "model.pt2",
    "tensorrt_plan": "model.plan",
}
"""The file each loader opens when the configuration names none."""
UNBATCHED_FORMATS = {"aoti_pt2": "Triton's torch_aoti platform does not batch requests yet (its README)"}
_ORT_LEVELS = {"disable": 2, "basic": -1, "extended": 1}
"""ONNX Runtime graph optimization levels in the backend's ``optimization.graph.level``; "all" is its default."""


def batching_refusal(model: DeployModel) -> str | None:
    """Why Triton will not batch this model's requests itself (``max_batch_size: 0``), or None."""
    deployable = model.deployable
    if model.max_batch is None:
        return None
    if deployable.format in UNBATCHED_FORMATS:
        return UNBATCHED_FORMATS[deployable.format]
    if deployable.batch_axes != {0}:
        return "not every input and output has its batch on the first axis, where Triton stacks requests"
    return None


def model_config(model: DeployModel, version_file: str, instances: int, max_queue_delay_us: int) -> dict[str, Any]:
    """The ``ModelConfig`` of ``model`` as plain data (see :mod:`aitune_core.deploy.triton.pbtxt`)."""
    deployable = model.deployable
    batched = model.max_batch is not None and batching_refusal(model) is None
    config: dict[str, Any] = {"name": model.name, **LOADERS[deployable.format]}
    config["max_batch_size"] = model.max_batch if batched and model.max_batch is not None else 0
    config["input"] = [_tensor(tensor, batched) for tensor in deployable.inputs]
    config["output"] = [_tensor(tensor, batched) for tensor in deployable.outputs]
    if batched:
        preferred = [size for size in model.batch_sizes if size <= config["max_batch_size"]]
        config["dynamic_batching"] = {
            **({"preferred_batch_size": preferred} if preferred else {}),
            "max_queue_delay_microseconds": max_queue_delay_us,
        }
    group: dict[str, Any] = {"count": instances, "kind": Enum("KIND_GPU" if _on_gpu(model) else "KIND_CPU")}
    if deployable.format == "tensorrt_plan" and deployable.runtime.profiles:
        group["profile"] = [str(index) for index in range(len(deployable.runtime.profiles))]
    config["instance_group"] = [group]
    if version_file != DEFAULT_FILES[deployable.format]:
        config["default_model_filename"] = version_file
    config.update(_runtime(model))
    return config


def _on_gpu(model: DeployModel) -> bool:
    return model.deployable.runtime.device == "cuda"


def _tensor(tensor: TensorIO, batched: bool) -> dict[str, Any]:
    dims = [-1 if tensor.varies(axis) else size for axis, size in enumerate(tensor.max_shape)]
    if batched:
        dims = dims[1:]
    described: dict[str, Any] = {"name": tensor.name, "data_type": Enum(TYPES[tensor.dtype]), "dims": dims or [1]}
    if not dims:  # a scalar (or a batch of them): Triton's dims are never empty, so [1] is reshaped to what it is
        described["reshape"] = {"shape": []}
    return described


def _parameters(values: dict[str, str]) -> list[dict[str, Any]]:
    return [{"key": key, "value": {"string_value": value}} for key, value in values.items()]


def _runtime(model: DeployModel) -> dict[str, Any]:
    """The loader's own settings: parameters, and ONNX Runtime's optimization block."""
    runtime = model.deployable.runtime
    settings = runtime.settings
    fmt = model.deployable.format
    parameters: dict[str, str] = {}
    extra: dict[str, Any] = {}
    if fmt == "onnx":
        if runtime.threads is not None:
            parameters["intra_op_thread_count"] = str(runtime.threads)
        if "inter_op_num_threads" in settings:
            parameters["inter_op_thread_count"] = settings["inter_op_num_threads"]
        if "execution_mode" in settings:
            parameters["execution_mode"] = "1" if settings["execution_mode"] == "parallel" else "0"
        level = _ORT_LEVELS.get(settings.get("graph_optimization_level", "all"))
        optimization: dict[str, Any] = {} if level is None else {"graph": {"level": level}}
        if settings.get("provider") == "tensorrt":
            accelerator: dict[str, Any] = {"name": "tensorrt"}
            if runtime.precision == "fp16":
                accelerator["parameters"] = [{"key": "precision_mode", "value": "FP16"}]
            optimization["execution_accelerators"] = {"gpu_execution_accelerator": [accelerator]}
        if optimization:
            extra["optimization"] = optimization
    elif fmt == "openvino_ir":
        if "performance_hint" in settings:
            parameters["PERFORMANCE_HINT"] = settings["performance_hint"].upper()
        if runtime.threads is not None:
            parameters["INFERENCE_NUM_THREADS"] = str(runtime.threads)
        if runtime.precision == "bf16":
            parameters["HINT_BF16"] = "YES"
    elif fmt == "aoti_pt2" and runtime.threads is not None:
        parameters["INTRA_OP_THREAD_COUNT"] = str(runtime.threads)
    if parameters:
        extra["parameters"] = _parameters(parameters)
    return extra
