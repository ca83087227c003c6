"""TensorSpec: what aitune knows about one tensor position across the calls it has seen.

Each axis is classified from three facts, all kept as plain integers so that merging
stays cheap even for calls with thousands of tensors:

* its smallest and largest size seen;
* a reference ``(size, batch_size)`` pair, kept only while every sample had
  ``size / batch_size`` equal to it (checked by cross-multiplication, no fractions).

An axis whose size never changed is static. One that changed in step with the batch
size by a whole multiplier is a batch axis (``batchN``), every other one is dynamic
(``dimN``). A multiplier of 1.5 is consistent, but not whole, so that axis is dynamic.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

AxisRef = tuple[int, int] | None
ShapeEntry = int | str


@attrs.define(eq=False)
class TensorSpec:
    """Shape range, dtype and batch relationship of one tensor position."""

    min_shape: list[int]
    max_shape: list[int]
    dtype: torch.dtype
    axis_refs: list[AxisRef] = attrs.field(repr=False)
    opt_sizes: list[int | None] | None = attrs.field(default=None, repr=False)
    """Declared sizes to optimise for, per axis (None: worked out from the range)."""

    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, batch_size: int | None = None) -> TensorSpec:
        return cls.from_shape(tuple(tensor.shape), tensor.dtype, batch_size)

    @classmethod
    def from_shape(cls, shape: Sequence[int], dtype: torch.dtype, batch_size: int | None = None) -> TensorSpec:
        sizes = [int(s) for s in shape]
        refs: list[AxisRef] = [None if batch_size is None else (s, batch_size) for s in sizes]
        return cls(list(sizes), list(sizes), dtype, refs)

    @property
    def rank(self) -> int:
        return len(self.min_shape)

    def _is_batch_axis(self, axis: int) -> bool:
        if self.min_shape[axis] == self.max_shape[axis]:
            return False
        ref = self.axis_refs[axis]
        return ref is not None and ref[1] > 0 and ref[0] % ref[1] == 0 and ref[0] >= ref[1]

    @property
    def shape(self) -> list[ShapeEntry]:
        """The shape as the tables print it: ints for static axes, ``batchN``/``dimN`` names."""
        result: list[ShapeEntry] = []
        for axis, (low, high) in enumerate(zip(self.min_shape, self.max_shape, strict=True)):
            if low == high:
                result.append(low)
            elif self._is_batch_axis(axis):
                result.append(f"batch{axis}")
            else:
                result.append(f"dim{axis}")
        return result

    @property
    def opt_shape(self) -> list[int]:
        """The shape backends optimise for: as declared, else the largest batch and the middle of each range."""
        opt = []
        for axis, (low, high) in enumerate(zip(self.min_shape, self.max_shape, strict=True)):
            declared = self.opt_sizes[axis] if self.opt_sizes is not None else None
            if declared is not None:
                opt.append(declared)
            else:
                opt.append(high if low == high or self._is_batch_axis(axis) else (low + high) // 2)
        return opt

    def has_batch_axis(self) -> bool:
        return any(self._is_batch_axis(axis) for axis in range(self.rank))

    def has_dynamic_axis(self) -> bool:
        return any(
            self.min_shape[axis] != self.max_shape[axis] and not self._is_batch_axis(axis) for axis in range(self.rank)
        )

    def get_batch_axis_multipliers(self) -> dict[int, int]:
        multipliers = {}
        for axis in range(self.rank):
            if self._is_batch_axis(axis):
                ref = self.axis_refs[axis]
                assert ref is not None
                multipliers[axis] = ref[0] // ref[1]
        return multipliers

    def dynamic_axes(self) -> list[int]:
        return [
            axis
            for axis in range(self.rank)
            if self.min_shape[axis] != self.max_shape[axis] and not self._is_batch_axis(axis)
        ]

    def matches(self, other: TensorSpec) -> bool:
        """Whether ``other`` describes the same tensor position: same rank and dtype."""
        return self.rank == other.rank and self.dtype == other.dtype

    def contains(self, shape: Sequence[int]) -> bool:
        """Whether a concrete shape lies within what was seen: static axes equal, others in range."""
        if len(shape) != self.rank:
            return False
        return all(low <= size <= high for size, low, high in zip(shape, self.min_shape, self.max_shape, strict=True))

    def merge(self, other: TensorSpec, where: str = "tensor") -> None:
        """Widen this spec with another sample of the same position (in place)."""
        if self.rank != other.rank:
            raise ValueError(
                f"{where}: rank changed from {self.rank} to {other.rank} "
                f"(shapes {self.min_shape} and {other.min_shape}); a different rank is a different graph"
            )
        if self.dtype != other.dtype:
            raise ValueError(f"{where}: dtype changed from {self.dtype} to {other.dtype}")
        for axis in range(self.rank):
            self.min_shape[axis] = min(self.min_shape[axis], other.min_shape[axis])
            self.max_shape[axis] = max(self.max_shape[axis], other.max_shape[axis])
            mine, theirs = self.axis_refs[axis], other.axis_refs[axis]
            if mine is not None and (theirs is None or mine[0] * theirs[1] != theirs[0] * mine[1]):
                self.axis_refs[axis] = None

    def copy(self) -> TensorSpec:
        opt = None if self.opt_sizes is None else list(self.opt_sizes)
        return TensorSpec(list(self.min_shape), list(self.max_shape), self.dtype, list(self.axis_refs), opt)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorSpec)
            and self.min_shape == other.min_shape
            and self.max_shape == other.max_shape
            and self.dtype == other.dtype
            and self.shape == other.shape
        )
