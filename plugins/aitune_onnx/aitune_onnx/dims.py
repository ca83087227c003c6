"""The ranged axes of a graph, as the two ONNX exporters take them and as the model shows them.

A graph spec knows which input axes are batch axes (size = multiplier x batch) and
which vary on their own (``dimN``), with their smallest and largest sizes. An exporter
that is not told bakes the example's sizes into the model, and one told too little
(independent names for axes that always move together) loses what runtimes such as
TensorRT need to plan for.

* The dynamo exporter gets the ``torch.export`` dims every exporting backend gets
  (:func:`aitune_core.plugin_api.export_dims`): one ``Dim("batch")`` shared by every
  batch axis, ``m * batch`` for an axis holding ``m`` rows per sample, and
  ``Dim.DYNAMIC`` with min and max for each other ranged axis, so that export itself
  works out which of those are equal (two inputs sharing a sequence length).
* The TorchScript exporter gets ``dynamic_axes`` names: ``batch`` / ``m*batch`` for
  batch axes of inputs and outputs, ``<input name>_dim<axis>`` for the others.

Both produce symbolic dims named ``batch`` and ``2*batch``; dims that only the dynamo
exporter names (``s17``) are renamed to ``<input name>_dim<axis>`` after export.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from aitune_core.plugin_api import BATCH_DIM, GraphSpec, varying_batch_range
from aitune_core.plugin_api.exported import IOLayout, flat_dynamic_shapes

if TYPE_CHECKING:
    import onnx

Dims = dict[str, list[int | str | None]]
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def batch_dim_name(multiplier: int) -> str:
    return BATCH_DIM if multiplier == 1 else f"{multiplier}*{BATCH_DIM}"


def dynamic_dim_name(input_name: str, axis: int) -> str:
    return f"{input_name}_dim{axis}"


def dynamo_shapes(graph: GraphSpec, layout: IOLayout) -> tuple[tuple[dict[int, Any] | None, ...]]:
    """``dynamic_shapes`` for exporting the flat adapter.

    See :func:`aitune_core.plugin_api.exported.flat_dynamic_shapes`.
    """
    return flat_dynamic_shapes(graph, layout)


def torchscript_axes(graph: GraphSpec, layout: IOLayout) -> dict[str, dict[int, str]]:
    """``dynamic_axes`` for the TorchScript exporter, by ONNX input and output name.

    Outputs only get their batch axes: their other sizes follow from the inputs, and the
    exporter's own shape inference names them after the input dims they come from.
    """
    axes: dict[str, dict[int, str]] = {}
    batched = varying_batch_range(graph) is not None
    for locator, name in zip(layout.inputs, layout.input_names, strict=True):
        spec = graph.input_spec.spec(locator)
        named = {axis: batch_dim_name(m) for axis, m in spec.get_batch_axis_multipliers().items()} if batched else {}
        named.update({axis: dynamic_dim_name(name, axis) for axis in spec.dynamic_axes()})
        if named:
            axes[name] = dict(sorted(named.items()))
    output_specs = dict(graph.output_spec.tensor_data)
    for locator, name in zip(layout.outputs, layout.output_names, strict=True):
        out_spec = output_specs.get(locator)
        if out_spec is not None and batched:
            named = {axis: batch_dim_name(m) for axis, m in out_spec.get_batch_axis_multipliers().items()}
            if named:
                axes[name] = named
    return axes


def dynamo_renames(graph: GraphSpec, layout: IOLayout, model_inputs: list[Any]) -> dict[str, str]:
    """Names for the symbols the dynamo exporter invented for dynamic axes (``s17``).

    model_inputs: the exported ``ir.Model``'s graph inputs, in order. A symbol shared by
    several axes is named after the first input axis that has it.
    """
    renames: dict[str, str] = {}
    for locator, name, value in zip(layout.inputs, layout.input_names, model_inputs, strict=False):
        shape = value.shape
        if shape is None:
            continue
        for axis in graph.input_spec.spec(locator).dynamic_axes():
            symbol = shape[axis]
            symbol_name = getattr(symbol, "value", None)
            if (
                isinstance(symbol_name, str)
                and _SYMBOL.fullmatch(symbol_name)
                and symbol_name not in renames
                and symbol_name != BATCH_DIM
            ):
                renames[symbol_name] = dynamic_dim_name(name, axis)
    return renames


# ---------------------------------------------------------------------- reading a model
def _value_dims(value: onnx.ValueInfoProto) -> list[int | str | None]:
    dims: list[int | str | None] = []
    for dim in value.type.tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return dims


def read_dims(model: onnx.ModelProto) -> tuple[Dims, Dims]:
    """Every graph input's and output's shape: sizes, symbolic names, or None where unknown."""
    inputs = {value.name: _value_dims(value) for value in model.graph.input}
    outputs = {value.name: _value_dims(value) for value in model.graph.output}
    return inputs, outputs


def symbolic_axes(dims: Dims) -> dict[str, dict[int, str]]:
    """``name -> {axis: symbol}`` for every axis with a symbolic size."""
    result = {}
    for name, shape in dims.items():
        named = {axis: size for axis, size in enumerate(shape) if isinstance(size, str)}
        if named:
            result[name] = named
    return result


def data_dependent_outputs(inputs: Dims, outputs: Dims) -> list[str]:
    """Outputs with a size the model does not tie to the input sizes (``nonzero``'s count).

    An output axis counts when its size is unknown or a symbol that no input dim uses
    (``u0`` from the dynamo exporter). This is read off the model's declared shapes, so
    it informs; the backend runs such outputs either way, since ONNX Runtime allocates
    every output at its real size.
    """
    known = {size for shape in inputs.values() for size in shape if isinstance(size, str)}
    known_symbols = {token for symbol in known for token in _SYMBOL.findall(symbol)}
    found = []
    for name, shape in outputs.items():
        for size in shape:
            if size is None or (isinstance(size, str) and not set(_SYMBOL.findall(size)) <= known_symbols):
                found.append(name)
                break
    return found
