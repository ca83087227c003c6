"""The short way for the commonest tuned call: one tensor, passed by position (``model(x)``).

The general path normalizes the call into named arguments, builds its graph key, looks
the route up, checks every input's shape and binds the call back: a few microseconds
of Python that matter when the backend itself takes 0.1-0.2 ms (a small model at batch
1 on a CPU). For ``model(x)`` all of that reduces to reading the tensor's rank, dtype
and device, one dict lookup and its size ranges, which is what a lane does.

A lane gives exactly what the general path gives: it exists only where a one-argument
call binds as given (validation called the backends that way too), and where plugins
add parts to graph keys it asks them on every call, as the key does, unless each of them
declared that it never keys this call (``aitune_graph_key_reads``). Anything it does
not recognize (another type, an untuned rank or dtype, a size outside the ranges, a
tensor that requires grad while grad is on, a call a plugin keys apart) goes the
general way, which says why it falls back.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch

from aitune_core.extensions import DeclaredKeyParts, KeyParts
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.module.router import Route

_PROBE = object()
_TENSOR = torch.Tensor
_grad_enabled = torch.is_grad_enabled


class SingleTensorLane:
    """The routes a lone positional tensor can take, by its part of the graph key (``tensor_key``)."""

    __slots__ = ("key_parts", "name", "routes")

    def __init__(self, name: str, routes: dict[Hashable, Route], key_parts: KeyParts | None = None) -> None:
        self.name = name
        self.routes = routes
        self.key_parts = key_parts

    def call_for(self, tensor: Any) -> Any:
        """The callable that serves ``module(tensor)``, or None to take the general path.

        It reads the tensor and nothing else, so the wrapper asks it before its staleness
        watch, whose tick a call must not spend unless it is routed.
        """
        if type(tensor) is not _TENSOR:
            return None
        # tensor_key(tensor), spelled out: at batch 1 every call saved shows (docs/benchmarks.md).
        route = self.routes.get(("T", tensor.dim(), tensor.dtype, "cpu" if tensor.is_cpu else tensor.device.type))
        if route is None or not route.single.fits(tensor.shape):  # type: ignore[union-attr]
            return None
        if tensor.requires_grad and _grad_enabled():
            return None
        if self.key_parts is not None and self.key_parts({self.name: tensor}) is not None:
            return None  # a plugin keys this call apart: its graph is not the lone tensor's
        if not route.lower_calls:
            return route.call
        _, axis, multiplier = route.batch_axis  # type: ignore[misc]  # set wherever lower_calls are
        return route.call_at(tensor.shape[axis] // multiplier)


def single_tensor_lane(
    routes: dict[Hashable, Route], signature: ForwardSignature, key_parts: KeyParts | None
) -> SingleTensorLane | None:
    """The lane for ``routes``, or None where the general path must see every call."""
    if not routes:
        return None
    try:
        arguments = signature.normalize((_PROBE,), {})
    except TypeError:  # the forward takes no positional argument
        return None
    if len(arguments) != 1:
        return None
    args, kwargs = signature.as_bound((_PROBE,), {}, arguments)
    if len(args) != 1 or kwargs:
        return None
    (name,) = arguments
    if arguments[name] is not _PROBE:  # a *args parameter: the tensor sits inside a tuple
        return None
    found: dict[Hashable, Route] = {}
    for key, route in routes.items():
        # A lone argument's key is ((name, its part),); a tensor's part is never a non-tensor's.
        entry = key[0] if isinstance(key, tuple) and len(key) == 1 else None
        if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == name and route.single is not None:
            found[entry[1]] = route
    if not found:
        return None
    if isinstance(key_parts, DeclaredKeyParts) and not key_parts.keys_lone_tensor(name):
        key_parts = None  # asked here, once per set of routes: no plugin may key this call
    return SingleTensorLane(name, found, key_parts)
