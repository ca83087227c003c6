"""The ONNX model a backend serves, described as a standalone artifact for deploy targets.

The ``.onnx`` file (with its external data file, under the name the model records) runs
in any ONNX Runtime, Triton's included, with no aitune and none of the model's code. Its
inputs and outputs are named as the export named them; the names are read back from the
model itself (``onnx.load`` without its weights), since an exporter may leave out an
input the graph never reads, and each gets the graph's recorded dtype, shape range and
batch axis. The session settings it was validated and timed with go with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aitune_core.plugin_api import GraphSpec
from aitune_core.plugin_api.deploy import Deployable, NoDeployable, RuntimeOptions, flat_io
from aitune_core.plugin_api.exported import IOLayout

if TYPE_CHECKING:
    from aitune_onnx.config import ONNXRuntimeBackendConfig

MODEL_FILE = "model.onnx"
_TRUE_TEXT = ("1", "true", "True")


def onnx_deployable(
    owner: str,
    config: ONNXRuntimeBackendConfig,
    model: Path | None,
    data: tuple[Path, str] | None,
    layout: IOLayout | None,
    graph: GraphSpec,
) -> Deployable | NoDeployable:
    """The ONNX model ``owner`` serves ``graph`` from; ``data`` is its external data file and the name it records."""
    if model is None or not model.is_file():
        return NoDeployable(f"{owner} has no ONNX model file; build it or restore it from a checkpoint")
    try:
        inputs, outputs = flat_io(layout, graph)
    except ValueError as error:
        return NoDeployable(f"{owner}: {error}")
    read_inputs, read_outputs = model_io_names(model)
    by_name = {tensor.name: tensor for tensor in (*inputs, *outputs)}
    unknown = [name for name in (*read_inputs, *read_outputs) if name not in by_name]
    if unknown:
        return NoDeployable(
            f"{owner}: the ONNX model has tensors {unknown} that graph {graph.name} does not record; export it again"
        )
    files = {MODEL_FILE: model}
    if data is not None:
        files[data[1]] = data[0]
    provider = config.provider
    settings = {
        "provider": provider,
        "graph_optimization_level": config.graph_optimization_level,
        "inter_op_num_threads": str(config.inter_op_num_threads),
        "execution_mode": config.execution_mode,
    }
    runtime = RuntimeOptions(
        device="cpu" if provider == "cpu" else "cuda",
        threads=config.intra_op_num_threads,
        precision=_precision(config),
        settings=settings,
    )
    ordered_in = [by_name[name] for name in read_inputs]
    ordered_out = [by_name[name] for name in read_outputs]
    return Deployable("onnx", files, MODEL_FILE, ordered_in, ordered_out, runtime)


def model_io_names(model: Path) -> tuple[list[str], list[str]]:
    """The input and output names an ONNX model declares (initializers listed as inputs are left out)."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    initializers = {initializer.name for initializer in proto.graph.initializer}
    inputs = [value.name for value in proto.graph.input if value.name not in initializers]
    return inputs, [value.name for value in proto.graph.output]


def _precision(config: ONNXRuntimeBackendConfig) -> str:
    """What float32 layers compute in: as eager on the CPU; TF32 or a TensorRT half type on a GPU."""
    options = config.provider_options or {}
    if config.provider == "cpu":
        return "fp32"
    if config.provider == "tensorrt" and options.get("trt_fp16_enable") in _TRUE_TEXT:
        return "fp16"
    return "fp32" if options.get("use_tf32") in ("0", "false", "False") else "tf32"
