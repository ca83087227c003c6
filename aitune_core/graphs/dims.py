"""A graph's ranged input axes as ``torch.export`` takes them, for every backend that exports.

A graph spec knows which input axes are batch axes (size = multiplier x batch) and
which vary on their own (``dimN``), with their smallest and largest sizes. An export
that is not told bakes the example's sizes into the program, and one told too little
(independent names for axes that always move together) fails, or loses what runtimes
need to plan for. Backends that export (AOT Inductor, the ONNX exporter) read the dims
here, so that they agree on what the graph's axes are.
"""

from __future__ import annotations

from typing import Any

from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.metadata.locator import Locator

BATCH_DIM = "batch"
"""The name of the dim that every batch axis shares."""


def varying_batch_range(graph: GraphSpec) -> tuple[int, int] | None:
    """The graph's batch range when it spans more than one size, else None: one size is no axis to export."""
    batch_range = graph.batch_range
    if batch_range is None or batch_range[0] >= batch_range[1]:
        return None
    return batch_range


def export_dims(graph: GraphSpec) -> dict[Locator, dict[int, Any]]:
    """``axis -> dim`` of every input tensor with a ranged axis, in input order.

    Batch axes share one ``Dim("batch")``, and an axis holding ``m`` rows per sample is
    the derived dim ``m * batch``, so that export knows the inputs' batch sizes move
    together. Dynamic axes get ``Dim.DYNAMIC`` with their min and max: export then works
    out how they relate (two inputs sharing a sequence length) instead of failing
    because two independent names were given to what the model requires equal.
    """
    from torch.export import Dim

    bounds = varying_batch_range(graph)
    batch = Dim(BATCH_DIM, min=bounds[0], max=bounds[1]) if bounds is not None else None
    result: dict[Locator, dict[int, Any]] = {}
    for locator, spec in graph.input_spec.tensor_data:
        dims: dict[int, Any] = {}
        if batch is not None:
            for axis, multiplier in spec.get_batch_axis_multipliers().items():
                dims[axis] = batch if multiplier == 1 else multiplier * batch
        for axis in spec.dynamic_axes():
            dims[axis] = Dim.DYNAMIC(min=spec.min_shape[axis], max=spec.max_shape[axis])
        if dims:
            result[locator] = dims
    return result
