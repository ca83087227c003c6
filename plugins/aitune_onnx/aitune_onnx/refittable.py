"""Undoing, at build time, what the ONNX optimizer does to weights that a refit could not redo.

The dynamo exporter's optimizer makes two rewrites that hold only for the values it saw:

* tensors equal when exported become one initializer (a freshly initialized transformer's
  LayerNorm weights are all ones, its biases zeros): after training they differ, but the
  graph has one initializer for all of them;
* a Gemm's or Conv's bias of zeros is dropped (with a BatchNorm folded in, the folded
  bias of a norm at its initial values is zeros too): after training it is not zero,
  but the graph has no input to put it in;
* a BatchNorm is folded into the convolution before it: where several norms hold the
  same values (all at their initial values), the values cannot tell which one it was.

:func:`separate_shared` gives each tensor its own initializer again, telling which node
reads which tensor from the module scope the exporter records on each node
(``pkg.torch.onnx.name_scopes``; the TorchScript exporter's node names say the same).
:func:`restore_biases` adds the dropped bias back as an initializer of zeros, mapped to
the module's bias or to the BatchNorm fold it came from; :func:`settle_folds` keeps, of
the norms that explain a folded weight, the one whose scope the fused node carries. All
leave every value the graph computes as it was; where a node's scope does not settle which
tensor it reads, the initializer is left shared (a refit then needs those tensors still
equal), and a fold keeps its alternatives (a refit needs them still alike).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import attrs
import torch

from aitune_core.plugin_api.exported import ConstantSource, TensorRecord, WeightMap

if TYPE_CHECKING:
    import onnx

MODULE_PREFIX = "module."
"""The flat adapter's attribute for the module: the exporter's scopes and names start with it."""
SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_BIASED_OPS = ("Conv", "Gemm")


def node_scopes(node: onnx.NodeProto) -> set[str]:
    """The module paths a node was exported from (``encoder.layer.0.output``), outermost to innermost."""
    for entry in node.metadata_props:
        if entry.key == SCOPES_KEY:
            try:
                scopes = ast.literal_eval(entry.value)
            except (ValueError, SyntaxError):
                return set()
            return {scope.removeprefix(MODULE_PREFIX) for scope in scopes if scope.startswith(MODULE_PREFIX)}
    parts = node.name.split("/")[1:-1]  # TorchScript: /module/encoder/layer.0/output/Add
    if not parts or parts[0] != MODULE_PREFIX.rstrip("."):
        return set()
    return {".".join(parts[1:index]) for index in range(2, len(parts) + 1)}


def _subgraph_inputs(graph: onnx.GraphProto) -> Iterator[str]:
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                for inner in subgraph.node:
                    yield from inner.input
                yield from _subgraph_inputs(subgraph)


def separate_shared(
    model: onnx.ModelProto, tensors: Mapping[str, torch.Tensor], values: Mapping[str, torch.Tensor]
) -> dict[str, str]:
    """Give each tensor its own initializer where the exporter kept one for several equal ones.

    values: each initializer's values, by name. Returns each added initializer's name and
    the name of the one it copies.
    """
    graph = model.graph
    initializers = {initializer.name: initializer for initializer in graph.initializer}
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in initializers:
                uses[name].append((node, index))
    inner = set(_subgraph_inputs(graph))
    added: dict[str, str] = {}
    for name, readers in uses.items():
        value = values.get(name)
        if len(readers) < 2 or name in inner or value is None or value.numel() < 2:
            continue
        equal = [
            fqn
            for fqn, tensor in tensors.items()
            if tensor.shape == value.shape and tensor.dtype == value.dtype and torch.equal(tensor.cpu(), value)
        ]
        found = [_owner(node_scopes(node), equal) for node, _ in readers]
        owners = [owner for owner in found if owner is not None]
        if len(equal) < 2 or len(owners) < len(found) or len(set(owners)) < 2:
            continue
        own = name.removeprefix(MODULE_PREFIX)
        keep = own if own in owners else owners[0]
        renamed = {owner: MODULE_PREFIX + owner for owner in sorted(set(owners)) if owner != keep}
        if any(new in initializers for new in renamed.values()):
            continue
        for new in renamed.values():
            copy = graph.initializer.add()
            copy.CopyFrom(initializers[name])
            copy.name = new
            initializers[new] = copy
            added[new] = name
        for (node, index), owner in zip(readers, owners, strict=True):
            if owner in renamed:
                node.input[index] = renamed[owner]
    return added


def _owner(scopes: set[str], candidates: list[str]) -> str | None:
    """The candidate tensor of the innermost module among ``scopes``; None when that does not settle it."""
    inside = [name for name in candidates if name.rpartition(".")[0] in scopes]
    if not inside:
        return None
    depth = max(name.count(".") for name in inside)
    deepest = [name for name in inside if name.count(".") == depth]
    return deepest[0] if len(deepest) == 1 else None


def settle_folds(model: onnx.ModelProto, weight_map: WeightMap) -> tuple[WeightMap, int]:
    """Keep, for a folded constant that several BatchNorms explained by value, the one its node was exported from.

    The optimizer's fused node keeps the BatchNorm's module scope. Returns the map with
    those constants settled, and how many were.
    """
    scopes: dict[str, set[str]] = defaultdict(set)
    for node in model.graph.node:
        for name in node.input:
            if name in weight_map.alternatives:
                scopes[name] |= node_scopes(node)
    constants = dict(weight_map.constants)
    alternatives = dict(weight_map.alternatives)
    for name, others in weight_map.alternatives.items():
        fitting = [source for source in (constants[name], *others) if source.norm and source.norm in scopes[name]]
        if len(fitting) == 1:
            constants[name] = fitting[0]
            del alternatives[name]
    settled = len(weight_map.alternatives) - len(alternatives)
    return attrs.evolve(weight_map, constants=constants, alternatives=alternatives), settled


def restore_biases(
    model: onnx.ModelProto, weight_map: WeightMap, tensors: Mapping[str, torch.Tensor]
) -> tuple[WeightMap, int]:
    """Put back the zero biases the optimizer dropped from Conv and Gemm nodes whose weight the map explains.

    The bias comes from the module's own (``<layer>.bias``, zeros now) or, for a weight
    with a BatchNorm folded in, from the fold (zeros while the norm is at its initial
    values). Returns the map with those biases in it, and how many were added.
    """
    from onnx import TensorProto

    graph = model.graph
    names = {initializer.name for initializer in graph.initializer}
    kinds = {initializer.name: initializer.data_type for initializer in graph.initializer}
    constants = dict(weight_map.constants)
    alternatives = dict(weight_map.alternatives)
    read: set[str] = set()
    for node in graph.node:
        if node.op_type not in _BIASED_OPS or len(node.input) != 2 or node.input[1] not in constants:
            continue
        if any(attribute.name == "beta" and attribute.f != 1.0 for attribute in node.attribute):
            continue
        weight = node.input[1]
        sources = [constants[weight], *alternatives.get(weight, [])]
        biases = [_bias_of(source, tensors) for source in sources]
        channels = _output_channels(node, constants[weight])
        if channels is None or any(bias is None for bias in biases):
            continue
        dtype = constants[weight].dtype
        made = [attrs.evolve(bias, shape=[channels], dtype=dtype) for bias in biases if bias is not None]
        if any(_norm_count(bias, tensors) != channels for bias in made):
            continue
        name = _unique(f"{weight}_bias", names)
        bias = graph.initializer.add()
        bias.name, bias.data_type = name, kinds[weight]
        bias.dims.append(channels)
        bias.raw_data = torch.zeros(channels, dtype=made[0].dtype).view(torch.uint8).numpy().tobytes()
        bias.data_location = TensorProto.DEFAULT
        node.input.append(name)
        names.add(name)
        constants[name] = made[0]
        if len(made) > 1:
            alternatives[name] = made[1:]
        for source in made:
            read.update(_reads(source, tensors))
    if not read:
        return weight_map, 0
    records = dict(weight_map.tensors)
    for fqn in read:
        records.setdefault(fqn, TensorRecord(list(tensors[fqn].shape), tensors[fqn].dtype))
    # A dropped bias the graph reads was taken for a tensor exported as one with an equal one, or frozen.
    groups = [[name for name in group if name not in read] for group in weight_map.equal]
    restored = attrs.evolve(
        weight_map,
        constants=constants,
        alternatives=alternatives,
        tensors=records,
        equal=[group for group in groups if len(group) > 1],
        frozen=[item for item in weight_map.frozen if item.name not in read],
    )
    return restored, len(constants) - len(weight_map.constants)


def _bias_of(source: ConstantSource, tensors: Mapping[str, torch.Tensor]) -> ConstantSource | None:
    """The source of the bias that goes with a weight's source, when it is zeros now; else None."""
    layer = source.tensor.rpartition(".")[0]
    bias = f"{layer}.bias" if f"{layer}.bias" in tensors else ""
    if source.kind in ("copy", "transpose"):
        if not bias or bool(tensors[bias].count_nonzero()):
            return None
        return ConstantSource("copy", list(tensors[bias].shape), tensors[bias].dtype, tensor=bias)
    if source.kind == "norm_weight":
        norm = source.norm
        shift = [tensors[f"{norm}.{part}"] for part in ("bias", "running_mean") if f"{norm}.{part}" in tensors]
        if (bias and bool(tensors[bias].count_nonzero())) or any(bool(item.count_nonzero()) for item in shift):
            return None
        return ConstantSource("norm_bias", [0], source.dtype, tensor=bias, norm=norm, eps=source.eps)
    return None


def _norm_count(source: ConstantSource, tensors: Mapping[str, torch.Tensor]) -> int:
    if source.kind == "copy":
        return tensors[source.tensor].numel()
    return tensors[f"{source.norm}.running_mean"].numel()


def _reads(source: ConstantSource, tensors: Mapping[str, torch.Tensor]) -> list[str]:
    names = [source.tensor] if source.tensor else []
    if source.norm:
        names += [f"{source.norm}.{part}" for part in ("weight", "bias", "running_mean", "running_var")]
    return [name for name in names if name in tensors]


def _output_channels(node: onnx.NodeProto, weight: ConstantSource) -> int | None:
    """The length of the node's bias: a Conv's output channels, a Gemm's N."""
    if node.op_type == "Conv":
        return weight.shape[0]
    transposed = any(attribute.name == "transB" and attribute.i == 1 for attribute in node.attribute)
    return weight.shape[0] if transposed else weight.shape[-1]


def _unique(name: str, taken: set[str]) -> str:
    candidate, count = name, 1
    while candidate in taken:
        count += 1
        candidate = f"{name}_{count}"
    return candidate
