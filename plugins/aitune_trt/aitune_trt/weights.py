"""Which of the module's tensors each weight of a TensorRT engine was made from.

TensorRT's ONNX parser names an engine's weights after the initializers of the ONNX
model it parsed (``INetworkDefinition.setWeightsName``), so a ``trt.Refitter`` takes
them by those names. The engine is built from the graph's export as it is, so the map
is the one of that file: each initializer, read with aitune-onnx, is matched to the
module's tensors by the core's :func:`~aitune_core.plugin_api.exported.map_constants`
(by name: the dynamo exporter names a kept tensor ``module.<name>``; by value: a weight
stored transposed, a BatchNorm folded into the layer before it; equal tensors exported
as one initializer must then stay equal).
"""

from __future__ import annotations

from pathlib import Path

from aitune_core.plugin_api import BuildContext
from aitune_core.plugin_api.exported import (
    Constant,
    WeightMap,
    flat_inputs,
    flat_run,
    graph_reads,
    map_constants,
    named_tensors,
)

MODULE_PREFIX = "module."
"""The export's flat adapter holds the module as ``module``: initializers kept as they were are ``module.<name>``."""


def engine_weight_map(onnx_path: Path, context: BuildContext) -> WeightMap:
    """The map of the ONNX model at ``onnx_path``, exported from ``context``'s module as it is now."""
    import onnx

    from aitune_onnx.refit import initializer_tensor

    model = onnx.load(str(onnx_path))  # with its external data, read from beside it
    names = set(named_tensors(context.module))
    constants = {}
    for initializer in model.graph.initializer:
        value = initializer_tensor(initializer)
        if value is not None:
            name = initializer.name.removeprefix(MODULE_PREFIX)
            constants[initializer.name] = Constant(value, name if name in names else None)
    del model
    adapter, inputs, _, _ = flat_inputs(
        context.module, context.graph_spec, context.samples, context.signature, context.device
    )
    return map_constants(context.module, constants, graph_reads(flat_run(adapter, inputs), context.module))
