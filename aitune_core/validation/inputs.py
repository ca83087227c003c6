"""Calls made from recorded samples: one per recorded shape and extreme, or at a batch size.

Profiling times these calls. Validation checks many more points, each called twice
on inputs of its own (see :mod:`aitune_core.validation.points`). The extremes are made
from recorded data (see ``SampleMetadata.make_shape``), as the dynamic-shapes RFC asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import torch

from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.metadata.copies import holds_state, owned_copy
from aitune_core.metadata.locator import Locator, map_leaves


@attrs.define(eq=False)
class CallInputs:
    """One call to check or time, ready to pass to the module: ``fn(*args, **kwargs)``."""

    label: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    batch_size: int | None = None
    fresh: Callable[[], tuple[tuple[Any, ...], dict[str, Any]]] | None = None
    """Where the arguments hold state a call changes (a KV cache): makes a new copy of them."""

    def bound(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments for one call: a copy of their own where a call would change them."""
        return self.fresh() if self.fresh is not None else (self.args, self.kwargs)


def to_device(value: Any, device: torch.device) -> Any:
    def move(_locator: Locator, leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor) and not leaf.is_meta and leaf.device != device:
            return leaf.to(device)
        return leaf

    return map_leaves(value, Locator(None), move)


def as_call(
    label: str,
    arguments: dict[str, Any],
    signature: ForwardSignature,
    device: torch.device,
    batch_size: int | None = None,
) -> CallInputs:
    placed = to_device(arguments, device)
    args, kwargs = signature.bind(placed)
    fresh = (lambda: signature.bind(owned_copy(placed))) if holds_state(placed) else None
    return CallInputs(label, args, kwargs, batch_size, fresh)


def _shape_signature(arguments: dict[str, Any], graph: GraphSpec) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(locator.get(arguments).shape) for locator in graph.input_spec.locators)


def validation_calls(
    graph: GraphSpec, samples: list[Sample], signature: ForwardSignature, device: torch.device
) -> list[CallInputs]:
    """Recorded samples first, then the min, opt and max shapes not already among them."""
    if not samples:
        raise ValueError(f"graph {graph.name} has no recorded sample to validate with")
    calls = []
    seen: set[tuple[tuple[int, ...], ...]] = set()
    for index, sample in enumerate(samples):
        seen.add(_shape_signature(sample.arguments, graph))
        calls.append(as_call(f"sample {index}", sample.arguments, signature, device, sample.batch_size))
    base = samples[0].arguments
    for which in ("min", "opt", "max"):
        arguments = graph.input_spec.make_shape(base, which)
        shapes = _shape_signature(arguments, graph)
        if shapes not in seen:
            seen.add(shapes)
            calls.append(as_call(f"{which} shape", arguments, signature, device))
    return calls


def batch_call(
    graph: GraphSpec, sample: Sample, signature: ForwardSignature, device: torch.device, batch_size: int
) -> CallInputs:
    """The recorded sample resized to ``batch_size`` (for profiling)."""
    arguments = graph.input_spec.make_batch(sample.arguments, batch_size)
    return as_call(f"batch {batch_size}", arguments, signature, device, batch_size)
