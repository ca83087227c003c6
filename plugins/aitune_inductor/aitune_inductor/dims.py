"""The ranged axes of a graph, told to torch.compile and torch.export.

A graph spec knows, for every input tensor, which axes are batch axes (size =
multiplier x batch size) and which vary on their own (``dimN``), with the smallest and
largest size seen. Compilers must hear the same: an axis they believe static is baked
into the kernels, and one they believe unbounded cannot be optimised for its range.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from aitune_core.plugin_api import GraphSpec, Locator, export_dims

# torch.compile specialises sizes 0 and 1 whatever it is told ("the zero-one
# specialization problem" in the dynamic shapes docs), and mark_dynamic refuses a
# lower bound it cannot keep. Ranges start at 2 unless the compile reasons about sizes
# size-obliviously (:mod:`aitune_inductor.size_one`), which lets them start at 1.
MIN_DYNAMIC_SIZE = 2


@attrs.frozen
class RangedAxis:
    """One axis whose size varies across the calls of a graph.

    multiplier: for batch axes, the size is ``multiplier * batch``; None for dynamic axes.
    """

    locator: Locator
    axis: int
    low: int
    high: int
    multiplier: int | None = None

    @property
    def name(self) -> str:
        return f"{self.locator.display_path}[{self.axis}]"


def ranged_axes(graph: GraphSpec) -> list[RangedAxis]:
    """Every batch and dynamic axis of the graph's inputs, in input order."""
    axes = []
    for locator, spec in graph.input_spec.tensor_data:
        for axis, multiplier in sorted(spec.get_batch_axis_multipliers().items()):
            axes.append(RangedAxis(locator, axis, spec.min_shape[axis], spec.max_shape[axis], multiplier))
        for axis in spec.dynamic_axes():
            axes.append(RangedAxis(locator, axis, spec.min_shape[axis], spec.max_shape[axis]))
    return axes


def compile_bounds(
    axis: RangedAxis, batch_range: tuple[int, int] | None, floor: int = MIN_DYNAMIC_SIZE
) -> tuple[int, int] | None:
    """The ``(min, max)`` to give ``mark_dynamic``, or None to leave the axis to specialise.

    Batch axes take their bounds from the batch range, so that all of them agree on
    ``size = multiplier * batch``; bounds that contradict a relation the model implies
    would make Dynamo raise. ``floor`` is the smallest size a range may start at.
    """
    if axis.multiplier is not None and batch_range is not None:
        low = axis.multiplier * max(batch_range[0], floor)
        high = axis.multiplier * batch_range[1]
    else:
        low, high = max(axis.low, floor), axis.high
    return (low, high) if low < high else None


def reaches_size_one(graph: GraphSpec) -> bool:
    """Whether some ranged axis takes a size below :data:`MIN_DYNAMIC_SIZE` (a batch of 1).

    Such a call falls outside the usual range and gets a graph of its own, unless the
    range is allowed to start at 1.
    """
    batch_range = graph.batch_range
    return any(
        compile_bounds(axis, batch_range, floor=1) != compile_bounds(axis, batch_range) for axis in ranged_axes(graph)
    )


def below_range(arguments: dict[str, Any], graph: GraphSpec) -> bool:
    """Whether a call has a ranged axis of a size below :data:`MIN_DYNAMIC_SIZE`."""
    return any(axis.locator.get(arguments).shape[axis.axis] < MIN_DYNAMIC_SIZE for axis in ranged_axes(graph))


def mark_dynamic(
    arguments: dict[str, Any], graph: GraphSpec, bounded: bool = True, floor: int = MIN_DYNAMIC_SIZE
) -> list[str]:
    """Mark the ranged axes of a call's tensors dynamic, before torch.compile first sees them.

    bounded: give the tuned min and max (``mark_dynamic``); without, only hint that the
        axis varies (``maybe_mark_dynamic``), for models whose shapes the bounds contradict.
    floor: the smallest size a range may start at; 1 only for a compile that reasons
        size-obliviously, which Dynamo needs to accept such a bound.
    Returns the axes marked, for the build report. Axes whose size in this call lies
    outside the bounds are left alone: marking them would fail the call.
    """
    import torch._dynamo

    marked = []
    batch_range = graph.batch_range
    for axis in ranged_axes(graph):
        bounds = compile_bounds(axis, batch_range, floor)
        if bounds is None:
            continue
        tensor = axis.locator.get(arguments)
        if not bounds[0] <= tensor.shape[axis.axis] <= bounds[1]:
            continue
        if bounded:
            torch._dynamo.mark_dynamic(tensor, axis.axis, min=bounds[0], max=bounds[1])
        else:
            torch._dynamo.maybe_mark_dynamic(tensor, axis.axis)
        marked.append(f"{axis.name} in [{bounds[0]}, {bounds[1]}]")
    return marked


def describe_dims(graph: GraphSpec) -> list[str]:
    """The dims an export gets, readable: ``x[0] = 2*batch in [2, 16]``, ``tokens[1] in [3, 9]``."""
    lines = []
    for axis in ranged_axes(graph):
        if axis.multiplier is None:
            lines.append(f"{axis.name} in [{axis.low}, {axis.high}]")
        else:
            factor = "" if axis.multiplier == 1 else f"{axis.multiplier}*"
            lines.append(f"{axis.name} = {factor}batch in [{axis.low}, {axis.high}]")
    return lines


def export_shapes(arguments: dict[str, Any], graph: GraphSpec) -> Any:
    """``dynamic_shapes`` for ``torch.export.export`` of a call with these arguments.

    The dims are the graph's (:func:`aitune_core.plugin_api.export_dims`: one shared
    batch dim, ``Dim.DYNAMIC`` with min and max for the other ranged axes). Tensors are
    keyed by identity (``ShapesCollection``), so ``arguments`` must hold the very
    tensors passed to export.
    """
    from torch.export import ShapesCollection

    shapes = ShapesCollection()
    for locator, dims in export_dims(graph).items():
        shapes[locator.get(arguments)] = dims
    return shapes


def _distinct_size(low: int, high: int) -> int:
    """A size in ``[low, high]`` unlikely to equal any static size of the model.

    Export and Inductor treat a dynamic size whose example value equals a static size
    (a batch of 16 in a model with 16 channels) as possibly the same symbol, and the
    compiled package can then silently compute wrong numbers at other sizes. A prime
    rarely collides with the power-of-two-ish sizes models use; 0 and 1 are avoided
    because they are always specialised.
    """
    for size in range(high, max(low, 2) - 1, -1):
        if size > 2 and all(size % d for d in range(2, int(size**0.5) + 1)):
            return size
    return high


def export_example(arguments: dict[str, Any], graph: GraphSpec) -> dict[str, Any]:
    """The recorded call resized so that every batch and dynamic axis has a distinct example size."""
    from aitune_core.plugin_api import Locator, map_leaves, resize

    batch_range = graph.batch_range
    batch = _distinct_size(*batch_range) if batch_range is not None else None
    targets: dict[Locator, list[int]] = {}
    for locator, spec in graph.input_spec.tensor_data:
        shape = list(locator.get(arguments).shape)
        if batch is not None:
            for axis, multiplier in spec.get_batch_axis_multipliers().items():
                shape[axis] = multiplier * batch
        for axis in spec.dynamic_axes():
            shape[axis] = _distinct_size(spec.min_shape[axis], spec.max_shape[axis])
        targets[locator] = shape

    def visit(locator: Locator, leaf: Any) -> Any:
        target = targets.get(locator)
        return resize(leaf, target) if target is not None and isinstance(leaf, torch.Tensor) else leaf

    return {name: map_leaves(value, Locator(name), visit) for name, value in arguments.items()}
