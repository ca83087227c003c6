"""Refit for OpenVINO: the stored IR with its constants made from new weights, compiled again, without converting.

OpenVINO's converter does not keep weights as the module holds them: it folds a
BatchNorm into the convolution before it (the weight scaled, the bias and the norm's
shift in one constant), reshapes biases for broadcasting, and keeps a tensor name
(``module_head_weight``, the flat adapter's ``module.head.weight`` with dots as
underscores) only on constants it left as they were. At build time
:func:`weight_map_for` reads the IR's Constant nodes, keyed by their friendly names, and
finds what each was made from (the core's
:func:`~aitune_core.plugin_api.exported.map_constants`, by name where one was kept and
by value otherwise).

A refit (:func:`write_refitted`) reads the stored IR, replaces each mapped Constant by a
new one made from the module's tensors now, in the constant's own element type (float16
where ``compress_to_fp16`` stored weights so, which keeps that compression), and saves
the IR into a folder of its own; the backend compiles it from those files, as after a
build, so a checkpoint saved afterwards carries the new weights. Constants of element
types numpy has no dtype for (bfloat16, 4-bit and other compressed weights) are left unmapped, and
the tensors they come from must not change (the map freezes them).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

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
from aitune_openvino.convert import BIN_FILE, XML_FILE

if TYPE_CHECKING:
    import openvino

MODULE_PREFIX = "module_"
"""The flat adapter's attribute for the module, as the converter writes tensor names (dots as underscores)."""
_TORCH_TYPES = {
    "f32": torch.float32,
    "f64": torch.float64,
    "f16": torch.float16,
    "i64": torch.int64,
    "i32": torch.int32,
    "i16": torch.int16,
    "i8": torch.int8,
    "u8": torch.uint8,
    "boolean": torch.bool,
}
"""OpenVINO element type name -> torch dtype, for the constants a refit can make: those numpy holds
(bfloat16 constants, which it does not, are left unmapped like compressed ones)."""


def constants_by_name(model: openvino.Model) -> dict[str, openvino.Node]:
    """The model's Constant nodes by friendly name; names that two constants share are left out."""
    found: dict[str, openvino.Node] = {}
    shared = set()
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Constant":
            continue
        name = node.get_friendly_name()
        if name in found:
            shared.add(name)
        found[name] = node
    return {name: node for name, node in found.items() if name not in shared}


def constant_tensor(node: openvino.Node) -> torch.Tensor | None:
    """A Constant's values as a torch tensor (a copy); None for element types torch has no dtype for."""
    dtype = _TORCH_TYPES.get(node.get_element_type().get_type_name())
    if dtype is None:
        return None
    shape = tuple(node.get_shape())
    return torch.from_numpy(node.get_data().copy()).to(dtype).reshape(shape)


def weight_map_for(xml: Path, weights: Path, context: BuildContext) -> WeightMap:
    """Which tensors of the context's module each Constant of the IR was made from."""
    from aitune_openvino.runtime import ov_core

    model = ov_core().read_model(model=str(xml), weights=str(weights))
    names = {MODULE_PREFIX + name.replace(".", "_"): name for name in named_tensors(context.module)}
    if len(names) != len(named_tensors(context.module)):
        names = {}  # two tensor names read alike with dots as underscores: names cannot settle anything
    constants = {}
    for name, node in constants_by_name(model).items():
        value = constant_tensor(node)
        if value is not None:
            constants[name] = Constant(value, _tensor_name(node, names))
    del model
    adapter, inputs, _, _ = flat_inputs(
        context.module, context.graph_spec, context.samples, context.signature, context.device
    )
    return map_constants(context.module, constants, graph_reads(flat_run(adapter, inputs), context.module))


def _tensor_name(node: openvino.Node, names: dict[str, str]) -> str | None:
    for tensor_name in node.output(0).get_names():
        found = names.get(tensor_name.split(":")[0])
        if found is not None:
            return found
    return None


def write_refitted(xml: Path, weights: Path, values: dict[str, torch.Tensor], folder: Path) -> tuple[Path, Path]:
    """``folder/model.xml`` and ``model.bin``: the IR with the named Constants replaced by ``values``."""
    import openvino as ov
    from openvino.utils import replace_node

    from aitune_openvino.runtime import ov_core

    model = ov_core().read_model(model=str(xml), weights=str(weights))
    nodes = constants_by_name(model)
    missing = sorted(set(values) - set(nodes))
    if missing:
        raise ValueError(f"the IR {xml} has no constants {missing}")
    for name, value in values.items():
        old = nodes[name]
        new = ov.op.Constant(value.numpy(), shared_memory=False)
        if new.get_element_type() != old.get_element_type() or list(new.get_shape()) != list(old.get_shape()):
            raise ValueError(
                f"constant {name} would become {new.get_element_type()} {new.get_shape()}, "
                f"it is {old.get_element_type()} {old.get_shape()}"
            )
        new.set_friendly_name(name)
        new.output(0).set_names(old.output(0).get_names())
        replace_node(old, new)
    model.validate_nodes_and_infer_types()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / XML_FILE
    # The constants are already in their stored element types: compressing again would change nothing
    # that was stored as float16, and would make float16 of what was kept float32.
    ov.save_model(model, str(target), compress_to_fp16=False)
    return target, folder / BIN_FILE
