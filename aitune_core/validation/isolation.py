"""Giving every validation call inputs of its own, and noticing a callee that writes to them.

A backend that changes its inputs in place (a fused op reusing an input buffer, a
preprocessing step done with ``x.neg_()``) corrupts the caller's tensors. If the
validation inputs were shared, the next candidate, eager included, would be compared
on corrupted data and rejected for the first one's fault. So each call gets a fresh
copy, and afterwards the copy is compared bit for bit with the pristine original.
"""

from __future__ import annotations

from typing import Any

import torch

from aitune_core.metadata.copies import copy_leaf
from aitune_core.metadata.locator import Locator, map_leaves, walk_inputs


def map_inputs(arguments: dict[str, Any], fn: Any) -> dict[str, Any]:
    """Rebuild named forward arguments with ``fn(locator, leaf)`` applied to every leaf.

    Locators are rooted at the parameter names, as in the graph's input spec.
    """
    return {name: map_leaves(value, Locator(name), fn) for name, value in arguments.items()}


def fresh_copy(arguments: dict[str, Any], device: torch.device | None = None) -> dict[str, Any]:
    """A copy of every tensor (moved to ``device`` when given) and every mutable object, that no other call shares."""
    return map_inputs(arguments, lambda _locator, leaf: copy_leaf(leaf, device))


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    return flat if flat.dtype == torch.bool else flat.view(torch.uint8)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bytes: NaN equals the same NaN, and -0.0 differs from 0.0."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_meta or b.is_meta or a.numel() == 0:
        return True
    b = b.to(a.device)
    try:
        return torch.equal(_bits(a), _bits(b))
    except (RuntimeError, TypeError):  # layouts without a byte view (sparse, quantized)
        return torch.equal(a, b)


def changed_inputs(pristine: dict[str, Any], after: dict[str, Any]) -> list[tuple[Locator, torch.Tensor]]:
    """The tensors of ``after`` (a fresh copy of ``pristine`` that was called with) whose contents changed."""
    originals = dict(walk_inputs(pristine))
    changed = []
    for locator, leaf in walk_inputs(after):
        original = originals.get(locator)
        if isinstance(leaf, torch.Tensor) and isinstance(original, torch.Tensor) and not bitwise_equal(leaf, original):
            changed.append((locator, leaf))
    return changed


def same_tensors(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two argument sets hold bitwise-equal tensors at every position."""
    theirs = dict(walk_inputs(b))
    for locator, leaf in walk_inputs(a):
        other = theirs.get(locator)
        if isinstance(leaf, torch.Tensor) and not (isinstance(other, torch.Tensor) and bitwise_equal(leaf, other)):
            return False
    return True
