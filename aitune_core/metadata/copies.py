"""Copies of a call's arguments that no other call can change.

A forward may change what it is given: a KV cache grows by a step, a ``StaticCache``
is written in place, a user object counts its calls. A stored sample that shared
objects with the call that made it, or a replay that shared them with the next, would
then hold another call's leftovers, and every candidate after the first would be
checked and timed on different inputs. Tensors are copied, containers rebuilt, and any
other object that is not plainly immutable is deep-copied.
"""

from __future__ import annotations

import copy
import enum
from typing import Any

import torch

from aitune_core.metadata.containers import CONTAINERS, DATACLASS, MAPPING, NAMEDTUPLE, SEQUENCE_LIST, SEQUENCE_TUPLE
from aitune_core.metadata.locator import Locator, map_leaves

IMMUTABLE = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    range,
    slice,
    type,
    enum.Enum,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    torch.Size,
)
BUILTIN_CONTAINERS = (SEQUENCE_LIST, SEQUENCE_TUPLE, NAMEDTUPLE, MAPPING, DATACLASS)


def is_immutable(leaf: Any) -> bool:
    return isinstance(leaf, IMMUTABLE) or leaf is Ellipsis or (callable(leaf) and not isinstance(leaf, torch.nn.Module))


def copy_leaf(leaf: Any, device: torch.device | str | None = None) -> Any:
    """A tensor copy (on ``device`` when given), the leaf itself when immutable, else a deep copy.

    An object that cannot be deep-copied is kept as it is: refusing the call would be
    worse than sharing an object the forward most likely only reads.
    """
    if isinstance(leaf, torch.Tensor):
        return leaf if leaf.is_meta else leaf.detach().to(device if device is not None else leaf.device, copy=True)
    if is_immutable(leaf):
        return leaf
    try:
        return copy.deepcopy(leaf)
    except Exception:  # any failure means "cannot copy", and sharing is the fallback
        return leaf


def owned_copy(value: Any, device: torch.device | str | None = None) -> Any:
    """``value`` rebuilt with every leaf passed through :func:`copy_leaf`."""
    return map_leaves(value, Locator(None), lambda _locator, leaf: copy_leaf(leaf, device))


def holds_state(value: Any) -> bool:
    """Whether a call could change ``value`` other than by writing into its tensors.

    True for any object that is neither a tensor nor plainly immutable, and for any
    container registered by a plugin or a user (a cache whose tensors a forward
    replaces): calls timed one after another on such a value need a copy each.
    """
    container = CONTAINERS.lookup(type(value))
    if container is None:
        return not isinstance(value, torch.Tensor) and not is_immutable(value)
    if container not in BUILTIN_CONTAINERS:
        return True
    return any(holds_state(child) for _step, child in container.flatten(value))
