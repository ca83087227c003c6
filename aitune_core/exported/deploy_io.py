"""An exported graph's flat inputs and outputs, as a deploy target names and shapes them.

An exported model (ONNX, an OpenVINO IR, a TensorRT engine) names its flat tensors after
their access paths (:mod:`aitune_core.exported.names`), in the layout's order. A backend
restored from a checkpoint holds that layout where JSON could carry it; where it could
not (a library's output class), the names are made again by the same rule from the
graph spec, whose tensors are listed in the same order as the call the layout was made
from. Either way each name gets the recorded dtype, shape range and batch axis.
"""

from __future__ import annotations

from aitune_core.backends.deployable import TensorIO
from aitune_core.exported.layout import IOLayout
from aitune_core.exported.names import io_names
from aitune_core.graphs.graph_spec import GraphSpec


def flat_io(layout: IOLayout | None, graph: GraphSpec) -> tuple[list[TensorIO], list[TensorIO]]:
    """The flat inputs and outputs of ``graph``'s export, named as the export named them."""
    ins, outs = graph.input_spec.tensor_data, graph.output_spec.tensor_data
    if layout is None:
        names = io_names([loc.display_path for loc, _ in ins], [loc.display_path for loc, _ in outs])
        return (
            [TensorIO.of_spec(name, spec) for name, (_, spec) in zip(names[0], ins, strict=True)],
            [TensorIO.of_spec(name, spec) for name, (_, spec) in zip(names[1], outs, strict=True)],
        )
    try:
        inputs = [
            TensorIO.of_spec(name, graph.input_spec.spec(locator))
            for locator, name in zip(layout.inputs, layout.input_names, strict=True)
        ]
        outputs = [
            TensorIO.of_spec(name, graph.output_spec.spec(locator))
            for locator, name in zip(layout.outputs, layout.output_names, strict=True)
        ]
    except KeyError as missing:
        raise ValueError(f"the stored layout names {missing}, which graph {graph.name} does not record") from None
    return inputs, outputs
