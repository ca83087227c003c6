"""The phase of a language-model call, prefill or decode, as a part of its graph key.

Prefill (the prompt, an empty cache) and decode (one token, a filled cache) run
different shapes through different code paths; each is its own graph, tuned and
routed on its own. The phase is read from what the call says, in this order:
``cache_position`` (its first position is 0 in prefill), the cache's past length,
the presence of a cache (without one, a ``use_cache=True`` call is a prefill).
"""

from __future__ import annotations

from typing import Any

import torch

from aitune_transformers.caches import past_length

PREFILL = "prefill"
DECODE = "decode"


def phase(arguments: dict[str, Any], cache_classes: tuple[type, ...]) -> str | None:
    """``"prefill"``, ``"decode"``, or None for a call that is not a cached language-model call."""
    arguments = _flat(arguments)
    caches = [value for value in arguments.values() if cache_classes and isinstance(value, cache_classes)]
    for cache in caches:
        length = past_length(cache)
        if length is not None:
            return PREFILL if length == 0 else DECODE
    position = arguments.get("cache_position")
    if isinstance(position, torch.Tensor) and position.numel() > 0:
        return PREFILL if int(position.reshape(-1)[0]) == 0 else DECODE
    if caches:
        return DECODE
    return PREFILL if arguments.get("use_cache") is True else None


def _flat(arguments: dict[str, Any]) -> dict[str, Any]:
    """Named arguments, with those a ``**kwargs`` parameter took (transformers' forwards have one) beside the rest."""
    flat = dict(arguments)
    for value in arguments.values():
        if isinstance(value, dict):
            flat.update((key, item) for key, item in value.items() if isinstance(key, str) and key not in flat)
    return flat
