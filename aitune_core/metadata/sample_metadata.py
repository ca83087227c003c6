"""SampleMetadata: the tensors (and, in strict mode, the other values) of a call.

It is built from one call, widened with :meth:`SampleMetadata.update_shapes_seen` as
more calls of the same graph arrive, and then tells backends which axes are batch
axes, which are dynamic, and the range of every size. It can also manufacture inputs
at another batch size or at the extremes of the ranges it has seen.

Two metadata are equal (and hash alike) when their calls belong to one graph, as the
graph key (:mod:`aitune_core.graphs.keying`) decides it: the same tensor paths, ranks
and dtypes, and in strict mode the same non-tensor values; sizes, and the order in
which parameters were given, do not count. Widening never changes that identity, so
metadata can key a dict while it learns shapes.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping
from typing import Any, Literal

import attrs
import torch

from aitune_core.metadata.leaf_key import leaf_value_key
from aitune_core.metadata.locator import Locator, map_leaves, walk_inputs, walk_outputs
from aitune_core.metadata.resize import resize
from aitune_core.metadata.tables import (
    OTHER_HEADERS,
    TENSOR_HEADERS_FULL,
    TENSOR_HEADERS_MEDIUM,
    render_table,
)
from aitune_core.metadata.tensor_spec import TensorSpec

ShapeChoice = Literal["min", "opt", "max"]


class InfoLevel(enum.Enum):
    """How much :meth:`SampleMetadata.describe` prints."""

    SHORT = "short"
    MEDIUM = "medium"
    FULL = "full"


@attrs.define(eq=False, repr=False)
class SampleMetadata:
    """Metadata of the inputs (rooted at parameter names) or outputs (rooted at ``output``)."""

    tensor_data: list[tuple[Locator, TensorSpec]]
    other_data: list[tuple[Locator, Any]]
    strict: bool = False
    batch_size: int | None = None
    is_output: bool = False
    num_samples: int = 1
    _index: dict[Locator, int] | None = attrs.field(default=None, alias="_index")

    @staticmethod
    def from_inputs(inputs: Mapping[str, Any], strict: bool = False, batch_size: int | None = None) -> SampleMetadata:
        """Capture a call given as a dict keyed by forward parameter name."""
        if not isinstance(inputs, Mapping):
            raise TypeError(
                "SampleMetadata.from_inputs expects a dict keyed by forward parameter name, "
                f"got {type(inputs).__name__}; bind the call first with ForwardSignature.normalize(args, kwargs)"
            )
        return SampleMetadata._capture(walk_inputs(dict(inputs)), strict, batch_size, is_output=False)

    @staticmethod
    def from_outputs(outputs: Any, strict: bool = False, batch_size: int | None = None) -> SampleMetadata:
        """Capture what a module returned; the root is shown as ``output``."""
        return SampleMetadata._capture(walk_outputs(outputs), strict, batch_size, is_output=True)

    @staticmethod
    def _capture(leaves: Any, strict: bool, batch_size: int | None, is_output: bool) -> SampleMetadata:
        _check_batch_size(batch_size, allow_none=True)
        tensors: list[tuple[Locator, TensorSpec]] = []
        others: list[tuple[Locator, Any]] = []
        for locator, leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                tensors.append((locator, TensorSpec.from_shape(leaf.shape, leaf.dtype, batch_size)))
            elif strict:
                others.append((locator, leaf))
        return SampleMetadata(tensors, others, strict, batch_size, is_output)

    # ------------------------------------------------------------------ queries
    @property
    def locators(self) -> list[Locator]:
        return [locator for locator, _ in self.tensor_data]

    def spec(self, locator: Locator) -> TensorSpec:
        if self._index is None:
            self._index = {loc: i for i, (loc, _) in enumerate(self.tensor_data)}
        return self.tensor_data[self._index[locator]][1]

    def has_batch_axis(self) -> bool:
        return any(spec.has_batch_axis() for _, spec in self.tensor_data)

    def has_dynamic_axis(self) -> bool:
        return any(spec.has_dynamic_axis() for _, spec in self.tensor_data)

    def batch_range(self) -> tuple[int, int] | None:
        """Smallest and largest batch size seen, read off the batch axes; None if there are none."""
        lows, highs = [], []
        for _, spec in self.tensor_data:
            for axis, multiplier in spec.get_batch_axis_multipliers().items():
                lows.append(spec.min_shape[axis] // multiplier)
                highs.append(spec.max_shape[axis] // multiplier)
        if not lows:
            return None
        return min(lows), max(highs)

    def copy(self) -> SampleMetadata:
        return SampleMetadata(
            [(loc, spec.copy()) for loc, spec in self.tensor_data],
            list(self.other_data),
            self.strict,
            self.batch_size,
            self.is_output,
            self.num_samples,
        )

    # ------------------------------------------------------------------ identity
    def graph_identity(self) -> Hashable:
        """What places these calls in one graph: the graph key's view of what this metadata holds.

        Per parameter (in any order), the path, rank and dtype of each tensor in the
        order met, and the key of each non-tensor value (kept in strict mode only).
        """
        roots: dict[str | None, tuple[list[Hashable], list[Hashable]]] = {}
        for locator, spec in self.tensor_data:
            roots.setdefault(locator.root, ([], []))[0].append((locator.keys, spec.rank, spec.dtype))
        for locator, value in self.other_data:
            roots.setdefault(locator.root, ([], []))[1].append((locator.keys, leaf_value_key(value)))
        parts = frozenset((root, tuple(tensors), tuple(others)) for root, (tensors, others) in roots.items())
        return (self.is_output, parts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SampleMetadata):
            return NotImplemented
        return self is other or self.graph_identity() == other.graph_identity()

    def __hash__(self) -> int:
        return hash(self.graph_identity())

    # ------------------------------------------------------------------ learning
    def update_shapes_seen(self, other: SampleMetadata) -> None:
        """Widen this metadata with another sample of the same structure (in place).

        Raises ValueError naming the tensor when the samples cannot belong to one graph:
        a tensor present in one but not the other, or a rank or dtype change.
        """
        if self._index is None:
            self._index = {loc: i for i, (loc, _) in enumerate(self.tensor_data)}
        if len(other.tensor_data) != len(self.tensor_data):
            mine = {loc.display_path for loc, _ in self.tensor_data}
            theirs = {loc.display_path for loc, _ in other.tensor_data}
            diff = sorted(mine ^ theirs)
            raise ValueError(
                f"samples have different tensors ({', '.join(diff) or 'same paths, different count'}); "
                "they belong to different graphs"
            )
        for locator, spec in other.tensor_data:
            position = self._index.get(locator)
            if position is None:
                raise ValueError(
                    f"tensor `{locator.display_path}` is not in this metadata; the samples belong to different graphs"
                )
            self.tensor_data[position][1].merge(spec, where=f"tensor `{locator.display_path}`")
        if self.batch_size != other.batch_size:
            self.batch_size = None
        self.num_samples += other.num_samples

    # ------------------------------------------------------------------ making inputs
    def make_batch(self, inputs: Any, batch_size: int) -> Any:
        """Return ``inputs`` with every batch axis resized to ``multiplier * batch_size``.

        Larger tensors are sliced, smaller ones repeated. Containers are rebuilt and
        non-tensor values kept; the given inputs are never mutated.
        """
        _check_batch_size(batch_size, allow_none=False)

        def target(spec: TensorSpec, tensor: torch.Tensor) -> list[int] | None:
            multipliers = spec.get_batch_axis_multipliers()
            if not multipliers:
                return None
            shape = list(tensor.shape)
            for axis, multiplier in multipliers.items():
                shape[axis] = multiplier * batch_size
            return shape

        return self._resize_leaves(inputs, target)

    def make_shape(self, inputs: Any, which: ShapeChoice) -> Any:
        """Return ``inputs`` resized to the min, opt or max shape of every tensor.

        Used to check backends at the edges of the ranges they were built for, as the
        dynamic-shapes RFC asks: min, opt and max inputs made from recorded data.
        """
        if which not in ("min", "opt", "max"):
            raise ValueError(f"which must be 'min', 'opt' or 'max', got {which!r}")

        def target(spec: TensorSpec, tensor: torch.Tensor) -> list[int] | None:
            return {"min": spec.min_shape, "opt": spec.opt_shape, "max": spec.max_shape}[which]

        return self._resize_leaves(inputs, target)

    def _spec_or_none(self, locator: Locator) -> TensorSpec | None:
        if self._index is None:
            self._index = {loc: i for i, (loc, _) in enumerate(self.tensor_data)}
        position = self._index.get(locator)
        return None if position is None else self.tensor_data[position][1]

    def _resize_leaves(self, inputs: Any, target: Any) -> Any:
        def visit(locator: Locator, leaf: Any) -> Any:
            if not isinstance(leaf, torch.Tensor):
                return leaf
            spec = self._spec_or_none(locator)
            if spec is None:
                return leaf
            if leaf.dim() != spec.rank:
                raise ValueError(
                    f"tensor `{locator.display_path}` has rank {leaf.dim()} (shape {list(leaf.shape)}) but was "
                    f"recorded with rank {spec.rank}; a different rank is a different graph"
                )
            shape = target(spec, leaf)
            return leaf if shape is None else resize(leaf, shape)

        if self.is_output:
            return map_leaves(inputs, Locator(None), visit)
        if not isinstance(inputs, Mapping):
            raise TypeError(
                "inputs must be a dict keyed by forward parameter name, "
                f"as given to from_inputs; got {type(inputs).__name__}"
            )
        rebuilt = type(inputs)() if isinstance(inputs, dict) else {}
        for name, value in inputs.items():
            rebuilt[name] = map_leaves(value, Locator(name), visit)
        return rebuilt

    # ------------------------------------------------------------------ display
    def describe(self, level: InfoLevel = InfoLevel.FULL) -> str:
        if level is InfoLevel.SHORT:
            text = "Tensors: " + (", ".join(loc.display_path for loc, _ in self.tensor_data) or "none")
            if self.other_data:
                text += "\nOther: " + ", ".join(loc.display_path for loc, _ in self.other_data)
            return text
        fmt = "fancy_grid" if level is InfoLevel.FULL else "simple"
        if self.tensor_data:
            if level is InfoLevel.FULL:
                rows = [
                    [loc.display_path, loc.semantic_display, spec.shape, spec.min_shape, spec.max_shape, spec.dtype]
                    for loc, spec in self.tensor_data
                ]
                headers = TENSOR_HEADERS_FULL
            else:
                rows = [[loc.display_path, loc.semantic_display, spec.shape] for loc, spec in self.tensor_data]
                headers = TENSOR_HEADERS_MEDIUM
            text = "Tensors:\n" + render_table(rows, headers, fmt)
        else:
            text = "Tensors: none"
        if self.other_data:
            rows = [[loc.display_path, loc.semantic_display, value] for loc, value in self.other_data]
            text += "\nOther:\n" + render_table(rows, OTHER_HEADERS, fmt)
        return text

    def __repr__(self) -> str:
        return self.describe(InfoLevel.FULL)

    __str__ = __repr__


def _check_batch_size(batch_size: Any, allow_none: bool) -> None:
    if batch_size is None and allow_none:
        return
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number of at least 1, got {batch_size!r}")
