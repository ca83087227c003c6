"""A recorded graph widened to the ranges the user declared.

Backends, validation and routing all read a graph's ranges from its input spec (min,
opt and max per axis, which axes are batch axes). So a declaration is applied by
making a copy of the recorded spec whose declared axes span the declared ranges:
Inductor marks them dynamic over that range, exports get those dims, TensorRT
profiles take min, opt and max, validation runs the min, opt and max shapes, and the
route accepts every size in the range. The recorded spec is left as it was, so a
later tune applies a (possibly changed) declaration to what was really recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aitune_core.graphs.declared_dims import BatchDim, DeclaredAxis, DeclaredRange, DynamicDim, DynamicShapes
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.metadata.locator import Locator
from aitune_core.metadata.sample_metadata import SampleMetadata
from aitune_core.metadata.tensor_spec import TensorSpec


class DeclarationError(ValueError):
    """A ``dynamic_shapes`` declaration does not fit what was recorded."""


def path_matches(path: str | tuple[object, ...], locator: Locator) -> bool:
    """Whether a declared path names this input: a parameter name, a display path or a tuple path."""
    if isinstance(path, str):
        return path == locator.display_path or (not locator.keys and path == locator.root)
    return tuple(path) == locator.semantic_path


def check_declared_paths(module_name: str, shapes: DynamicShapes, graphs: Sequence[GraphSpec]) -> None:
    """Every declared path must name an input tensor of some recorded graph (tune time, before any build)."""
    recorded = {locator.display_path: locator for graph in graphs for locator in graph.input_spec.locators}
    for declared in shapes.axes:
        if not any(path_matches(declared.path, locator) for locator in recorded.values()):
            raise DeclarationError(
                f"aitune module `{module_name}`: dynamic_shapes names {declared.shown_path}, which no recorded call "
                f"has as a tensor; the recorded input tensors are {', '.join(sorted(recorded)) or 'none'}"
            )


def declared_graph(graph: GraphSpec, shapes: DynamicShapes, samples: Sequence[Sample]) -> GraphSpec:
    """A copy of ``graph`` whose input spec spans the declared ranges (see module docstring).

    Raises DeclarationError naming the sample and the axis when a recorded call lies
    outside its declared range, or the axis does not exist.
    """
    inputs = graph.input_spec.copy()
    outputs = graph.output_spec.copy()
    specs = dict(inputs.tensor_data)
    resolved = [
        (locator, declared) for declared in shapes.axes for locator in specs if path_matches(declared.path, locator)
    ]
    if not resolved:
        return graph
    ranges: list[DeclaredRange] = []
    for locator, declared in resolved:
        spec = specs[locator]
        _check_axis(graph, locator, spec, declared, samples)
        ranges.append(_apply(locator, spec, declared.axis, declared.dim))
    batch = next((declared.dim for _, declared in resolved if isinstance(declared.dim, BatchDim)), None)
    if batch is not None:
        ranges += _widen_batch_axes(inputs, batch, skip={(loc, d.axis) for loc, d in resolved})
        _widen_batch_axes(outputs, batch, skip=set())
    ranges += _followers(graph, inputs, resolved, samples)
    return GraphSpec(graph.name, inputs, outputs, graph.key, ranges)


def _check_axis(
    graph: GraphSpec, locator: Locator, spec: TensorSpec, declared: DeclaredAxis, samples: Sequence[Sample]
) -> None:
    where = f"graph {graph.name}: `{locator.display_path}`"
    axis, dim = declared.axis, declared.dim
    if axis >= spec.rank:
        raise DeclarationError(
            f"{where} has rank {spec.rank}, so it has no axis {axis} to declare; its axes are 0..{spec.rank - 1}"
        )
    multiplier = _multiplier(spec, axis) if isinstance(dim, BatchDim) else 1
    low, high = multiplier * dim.min, multiplier * dim.max
    if low <= spec.min_shape[axis] and spec.max_shape[axis] <= high:
        return
    for index, sample in enumerate(samples):
        size = locator.get(sample.arguments).shape[axis]
        if not low <= size <= high:
            raise DeclarationError(
                f"{where} axis {axis} has size {size} in recorded sample {index}, outside the declared "
                f"{dim.describe()}; widen the declaration or leave such calls out of the tuning data"
            )
    raise DeclarationError(
        f"{where} axis {axis} was recorded with sizes {spec.min_shape[axis]}..{spec.max_shape[axis]}, outside the "
        f"declared {dim.describe()}; widen the declaration or leave such calls out of the tuning data"
    )


def _multiplier(spec: TensorSpec, axis: int) -> int:
    return spec.get_batch_axis_multipliers().get(axis, 1)


def _apply(
    locator: Locator, spec: TensorSpec, axis: int, dim: DynamicDim | BatchDim, follows: bool = False
) -> DeclaredRange:
    """Set the axis's range (and opt) to the dim's; a batch axis keeps its rows-per-sample multiplier."""
    multiplier = _multiplier(spec, axis) if isinstance(dim, BatchDim) else 1
    spec.min_shape[axis] = multiplier * dim.min
    spec.max_shape[axis] = multiplier * dim.max
    # A batch axis is one whose size is a whole multiple of the batch; a dynamic one has no such reference.
    spec.axis_refs[axis] = (multiplier, 1) if isinstance(dim, BatchDim) else None
    if spec.opt_sizes is None:
        spec.opt_sizes = [None] * spec.rank
    spec.opt_sizes[axis] = multiplier * dim.opt
    return DeclaredRange(locator.display_path, axis, dim.name, dim.min, dim.opt, dim.max, follows)


def _widen_batch_axes(metadata: SampleMetadata, batch: BatchDim, skip: set[tuple[Locator, int]]) -> list[DeclaredRange]:
    """Every recorded batch axis takes the declared batch range: all of a graph's batch axes are one size."""
    applied = []
    for locator, spec in metadata.tensor_data:
        for axis in list(spec.get_batch_axis_multipliers()):
            if (locator, axis) not in skip:
                applied.append(_apply(locator, spec, axis, batch, follows=True))
    return applied


def _followers(
    graph: GraphSpec,
    inputs: SampleMetadata,
    declared: Iterable[tuple[Locator, DeclaredAxis]],
    samples: Sequence[Sample],
) -> list[DeclaredRange]:
    """Undeclared axes that always had the declared axis's size, and varied with it, take its range.

    An attention mask recorded with the same lengths (or batch sizes, when tune was not
    told them) as ``input_ids`` must accept the same ones once served, or every call at
    a new size would fall back.
    """
    recorded = dict(graph.input_spec.tensor_data)
    specs = dict(inputs.tensor_data)
    taken = {(loc, d.axis) for loc, d in declared}
    applied = []
    for leader, axis_declared in declared:
        lead = recorded[leader]
        axis = axis_declared.axis
        if lead.min_shape[axis] == lead.max_shape[axis]:
            continue  # a size that never changed says nothing about which other axes move with it
        for locator, spec in recorded.items():
            for other in range(spec.rank):
                if (locator, other) in taken or other in spec.get_batch_axis_multipliers():
                    continue
                span = (spec.min_shape[other], spec.max_shape[other])
                if span == (lead.min_shape[axis], lead.max_shape[axis]) and all(
                    locator.get(s.arguments).shape[other] == leader.get(s.arguments).shape[axis] for s in samples
                ):
                    taken.add((locator, other))
                    applied.append(_apply(locator, specs[locator], other, axis_declared.dim, follows=True))
    return applied
