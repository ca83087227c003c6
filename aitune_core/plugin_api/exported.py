"""What a backend that runs a graph exported flat needs beyond :mod:`aitune_core.plugin_api`.

ONNX Runtime, TensorRT and OpenVINO run a graph from a file that holds flat tensors
in and out. These names turn a call's nested arguments (tuples, dicts, ``ModelOutput``)
into those flat tensors and back, export the module seen flat with ``torch.export``
and the graph's ranged axes, and give the base class that keeps the layout and the
forward signature through builds and checkpoints; and, for ``Backend.refit``, the map from
an exported graph's constants to the module's tensors (:class:`WeightMap`, found by
:func:`map_constants`) and the constants made again from new weights (:func:`constant_values`).
They live apart from the backend surface because they load ``torch.export`` machinery a backend of another kind never
needs; like it, they keep their meaning within a plugin API version.
"""

from __future__ import annotations

from aitune_core.exported.base import ExportedGraphBackend
from aitune_core.exported.flat import (
    FlatModule,
    OutputMismatchError,
    example_call,
    flat_dynamic_shapes,
    flat_inputs,
    modes_kept,
)
from aitune_core.exported.layout import (
    ConstantMismatchError,
    IOLayout,
    LayoutNotSerializable,
    check_layout_fits_graph,
    layout_from_context,
)
from aitune_core.exported.names import io_names, sanitize, unique_names
from aitune_core.exported.quiet import quiet_export
from aitune_core.exported.refit_folders import RefitFolders
from aitune_core.exported.weight_map import (
    ConstantSource,
    TensorRecord,
    WeightMap,
    constant_values,
    named_tensors,
    weight_map_from_data,
    weight_map_to_data,
)
from aitune_core.exported.weight_matching import Constant, flat_run, graph_reads, map_constants

__all__ = [
    "Constant",
    "ConstantMismatchError",
    "ConstantSource",
    "ExportedGraphBackend",
    "FlatModule",
    "IOLayout",
    "LayoutNotSerializable",
    "OutputMismatchError",
    "RefitFolders",
    "TensorRecord",
    "WeightMap",
    "check_layout_fits_graph",
    "constant_values",
    "example_call",
    "flat_dynamic_shapes",
    "flat_inputs",
    "flat_run",
    "graph_reads",
    "io_names",
    "layout_from_context",
    "map_constants",
    "modes_kept",
    "named_tensors",
    "quiet_export",
    "sanitize",
    "unique_names",
    "weight_map_from_data",
    "weight_map_to_data",
]
