"""Where a candidate is checked: which shapes, which samples, and the data of each call.

A backend can be right at the shapes it was built with and wrong elsewhere in the range
it serves (a tail bug at odd batch sizes, a kernel picked per bucket), and right on the
first call of a shape but not the next (a static output buffer handed back again). So
every point is called twice, with different data, and the points are:

* every stored sample, at its recorded shape;
* the batch sizes a tuned module serves where such bugs hide: both ends of the range,
  every power of two in it (where users tune and profiling measures), every batch size
  a stored sample was recorded at, and the non-powers of two next to both ends;
* the min, opt and max shapes, for dynamic axes other than the batch.

Batches are made by stacking the rows of the stored samples, so that rows differ: a
batch of one row repeated cannot show a backend that mixes rows up. The second call of
a point starts from the next stored sample; with a single sample, or samples that give
the same data, it perturbs the first call's data instead (noise for floats, rows or
positions rolled for integers, which keeps token ids valid).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import torch

from aitune_core.graphs.batch_sizes import sweep_batch_sizes
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.metadata.locator import Locator, walk_inputs
from aitune_core.metadata.resize import resize
from aitune_core.metadata.sample_metadata import ShapeChoice
from aitune_core.validation.isolation import fresh_copy, map_inputs, same_tensors

CALL_NAMES = ("first call", "second call")
NOISE_SCALE = 0.1
"""Noise added to float inputs for a second call, relative to each tensor's spread."""


@attrs.define(eq=False)
class ValidationPoint:
    """One shape to check, and the arguments (on the CPU) of its first and second call."""

    label: str
    calls: list[dict[str, Any]]
    batch_size: int | None = None
    recorded: bool = False
    """The first call is a stored sample as recorded, so eager must accept it."""


def validation_batch_sizes(graph: GraphSpec, samples: list[Sample]) -> list[int]:
    """The batch sizes checked, ascending; empty for a graph without a batch axis."""
    batch_range = graph.batch_range
    if batch_range is None:
        return []
    low, high = batch_range
    sizes = set(sweep_batch_sizes(low, high))
    sizes |= {s.batch_size for s in samples if s.batch_size is not None and low <= s.batch_size <= high}
    above_low = low + 1 if not _power_of_two(low + 1) else low + 2
    below_high = high - 1 if not _power_of_two(high - 1) else high - 2
    sizes |= {size for size in (above_low, below_high) if low < size < high}
    return sorted(sizes)


def validation_points(graph: GraphSpec, samples: list[Sample]) -> list[ValidationPoint]:
    """Stored samples first, then batch sizes, then the min, opt and max shapes not yet covered."""
    if not samples:
        raise ValueError(f"graph {graph.name} has no recorded sample to validate with")
    builder = _Builder(graph, samples)
    points = [builder.stored(index) for index in range(len(samples))]
    seen = {_shapes(point.calls[0]) for point in points}

    def add(point: ValidationPoint) -> None:
        shapes = _shapes(point.calls[0])
        if shapes not in seen:
            seen.add(shapes)
            points.append(point)

    for position, batch_size in enumerate(validation_batch_sizes(graph, samples)):
        add(builder.at_batch(batch_size, position % len(samples)))
    extremes: tuple[ShapeChoice, ...] = ("min", "opt", "max")
    for which in extremes:
        add(builder.at_extreme(which))
    for point in points:  # owned copies: nothing that later writes to the stored samples reaches them
        point.calls = [fresh_copy(arguments) for arguments in point.calls]
    return points


class _Builder:
    def __init__(self, graph: GraphSpec, samples: list[Sample]) -> None:
        self.graph = graph
        self.samples = samples
        self.batch_axes = _single_batch_axes(graph)

    def stored(self, index: int) -> ValidationPoint:
        sample = self.samples[index]
        first = sample.arguments
        where = f"batch {sample.batch_size}, sample {index}" if sample.batch_size is not None else f"sample {index}"
        return ValidationPoint(where, [first, self._second(first, index)], sample.batch_size, recorded=True)

    def at_batch(self, batch_size: int, index: int) -> ValidationPoint:
        first = self.graph.input_spec.make_batch(self.pooled(index), batch_size)
        return ValidationPoint(f"batch {batch_size}, sample {index}", [first, self._second(first, index)], batch_size)

    def at_extreme(self, which: ShapeChoice) -> ValidationPoint:
        first = self.graph.input_spec.make_shape(self.pooled(0), which)
        return ValidationPoint(f"{which} shape, sample 0", [first, self._second(first, 0)])

    def pooled(self, start: int) -> dict[str, Any]:
        """Sample ``start``'s arguments with the rows of the other samples of the same shape appended.

        Only samples whose sizes agree off the batch axis are stacked, and every tensor
        takes the samples in the same order, so rows of different tensors stay paired.
        """
        ordered = [self.samples[(start + k) % len(self.samples)] for k in range(len(self.samples))]
        base = ordered[0].arguments
        if not self.batch_axes or len(ordered) == 1:
            return base
        key = self._off_batch_shapes(base)
        stacked = [s.arguments for s in ordered if self._off_batch_shapes(s.arguments) == key]

        def stack(locator: Locator, leaf: Any) -> Any:
            axis = self.batch_axes.get(locator)
            if axis is None or not isinstance(leaf, torch.Tensor):
                return leaf
            return torch.cat([locator.get(arguments) for arguments in stacked], dim=axis)

        return map_inputs(base, stack)

    def _off_batch_shapes(self, arguments: dict[str, Any]) -> tuple[Any, ...] | None:
        shapes = []
        for locator, axis in self.batch_axes.items():
            try:
                tensor = locator.get(arguments)
            except (KeyError, IndexError, TypeError):
                return None
            if not isinstance(tensor, torch.Tensor):
                return None
            shape = list(tensor.shape)
            shape[axis] = -1
            shapes.append((tensor.dtype, tuple(shape)))
        return tuple(shapes)

    def _second(self, first: dict[str, Any], index: int) -> dict[str, Any]:
        if len(self.samples) > 1:
            second = _reshaped_like(self.pooled((index + 1) % len(self.samples)), first)
            if not same_tensors(second, first):
                return second
        return _perturbed(first, self.batch_axes, seed=index)


def _power_of_two(size: int) -> bool:
    return size > 0 and size & (size - 1) == 0


def _single_batch_axes(graph: GraphSpec) -> dict[Locator, int]:
    """The batch axis of every input tensor that has exactly one (rows can be stacked along it)."""
    axes = {}
    for locator, spec in graph.input_spec.tensor_data:
        multipliers = spec.get_batch_axis_multipliers()
        if len(multipliers) == 1:
            axes[locator] = next(iter(multipliers))
    return axes


def _tensors(arguments: dict[str, Any]) -> Iterator[tuple[Locator, torch.Tensor]]:
    for locator, leaf in walk_inputs(arguments):
        if isinstance(leaf, torch.Tensor):
            yield locator, leaf


def _shapes(arguments: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((locator.display_path, tuple(tensor.shape)) for locator, tensor in _tensors(arguments))


def _reshaped_like(source: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """``target`` with each tensor's values taken from ``source``, resized to the target's shape.

    Non-tensor values stay the target's, so the two calls differ only in tensor data. A
    tensor that cannot be made from the source (another rank or dtype) stays the target's.
    """

    def take(locator: Locator, leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor) or leaf.is_meta:
            return leaf
        try:
            other = locator.get(source)
        except (KeyError, IndexError, TypeError):
            return leaf
        if not isinstance(other, torch.Tensor) or other.dim() != leaf.dim() or other.dtype != leaf.dtype:
            return leaf
        try:
            return resize(other, leaf.shape)
        except ValueError:  # an empty axis has nothing to repeat
            return leaf

    return map_inputs(target, take)


def _perturbed(arguments: dict[str, Any], batch_axes: dict[Locator, int], seed: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed)

    def change(locator: Locator, leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor) or leaf.is_meta or leaf.numel() == 0:
            return leaf
        if leaf.is_floating_point():
            noise = torch.randn(leaf.shape, generator=generator, dtype=torch.float32)
            return leaf + (noise * NOISE_SCALE * _spread(leaf)).to(leaf.dtype)
        if leaf.is_complex():
            return leaf
        axis = batch_axes.get(locator)
        if axis is None or leaf.shape[axis] < 2:
            axis = next((a for a in reversed(range(leaf.dim())) if leaf.shape[a] > 1), None)
        return leaf if axis is None else leaf.roll(1, dims=axis)

    return map_inputs(arguments, change)


def _spread(tensor: torch.Tensor) -> float:
    values = tensor.detach().double()
    values = values[torch.isfinite(values)]
    spread = float(values.std()) if values.numel() > 1 else 0.0
    if spread > 0:
        return spread
    return max(float(values.abs().mean()) if values.numel() else 0.0, 1.0)
