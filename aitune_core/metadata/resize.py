"""Resizing tensors along axes by slicing or repeating their own data.

Generated inputs (a larger batch, the min or max shape of a dynamic axis) are built
from real recorded values rather than random ones, so token ids stay valid indices
and masks stay masks: slicing and tiling only reuse values that were really seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def resize_axis(tensor: torch.Tensor, axis: int, size: int) -> torch.Tensor:
    current = tensor.shape[axis]
    if size == current:
        return tensor
    if size < current:
        return tensor.narrow(axis, 0, size)
    if current == 0:
        raise ValueError(f"cannot grow axis {axis} from 0 to {size}: there is no data to repeat")
    repeats = [1] * tensor.dim()
    repeats[axis] = math.ceil(size / current)
    return tensor.repeat(*repeats).narrow(axis, 0, size)


def resize(tensor: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Return a tensor of ``shape`` made from ``tensor``'s values (never mutates it)."""
    if len(shape) != tensor.dim():
        raise ValueError(f"cannot resize a rank-{tensor.dim()} tensor to {list(shape)}")
    for axis, size in enumerate(shape):
        tensor = resize_axis(tensor, axis, int(size))
    return tensor
