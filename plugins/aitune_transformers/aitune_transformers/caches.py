"""transformers' cache objects as containers, so their tensors are inputs and outputs like any other.

A KV cache is a ``Cache`` holding one ``CacheLayerMixin`` per layer, each holding
``keys`` and ``values`` (and, by kind, a few more tensors). Registered here, those
tensors appear in graph specs (``past_key_values.layers[0].keys``, shape
``[batch0, 2, dim0, 32]``), are copied for every replay, resized with the batch, and
compared with eager's after each call. The cache and layer objects themselves are
rebuilt on every copy, with their other state copied too: a forward grows a
``DynamicCache`` by replacing its tensors and a ``StaticCache`` writes into them, and
neither may reach a stored sample or the next candidate's inputs.

Matching is by base class, so caches of every kind and of later transformers versions
(``DynamicCache``, ``StaticCache``, ``EncoderDecoderCache``, sliding-window layers) are
walked the same way: through their attributes that hold tensors, layers or caches.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch


def cache_types() -> tuple[type, ...]:
    """``(Cache, CacheLayerMixin)`` of the installed transformers; the layer base is absent before 4.56."""
    from transformers import cache_utils

    found = [getattr(cache_utils, name, None) for name in ("Cache", "CacheLayerMixin")]
    return tuple(cls for cls in found if isinstance(cls, type))


def _walkable(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, (torch.Tensor, *kinds)):
        return True
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(_walkable(item, kinds) for item in value)


def flattener(kinds: tuple[type, ...]) -> Any:
    """``flatten`` for a cache or layer: the attributes that hold tensors, layers or caches, in order."""

    def flatten(obj: Any) -> list[tuple[str, Any]]:
        return [(name, value) for name, value in vars(obj).items() if _walkable(value, kinds)]

    return flatten


def rebuilder(kinds: tuple[type, ...]) -> Any:
    """``unflatten``: a new object with the given children and a copy of everything else it holds."""
    flatten = flattener(kinds)

    def unflatten(obj: Any, children: Sequence[Any]) -> Any:
        rebuilt = copy.copy(obj)
        walked = [name for name, _ in flatten(obj)]
        for name, value in vars(obj).items():
            if name not in walked:
                # Counters, flags and per-layer dicts change with every step as well.
                object.__setattr__(rebuilt, name, copy.deepcopy(value))
        for name, child in zip(walked, children, strict=True):
            object.__setattr__(rebuilt, name, child)
        return rebuilt

    return unflatten


def past_length(cache: Any) -> int | None:
    """Tokens already in ``cache`` (its first layer's), or None where the cache cannot say."""
    try:
        return int(cache.get_seq_length())
    except Exception:  # a cache kind without a length leaves the phase to other signs
        return None
