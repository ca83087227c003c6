"""The key of one non-tensor value in strict mode: what makes ``mode="train"`` and ``mode="eval"`` two graphs.

Graph keys (:mod:`aitune_core.graphs.keying`) and :class:`SampleMetadata` equality use
this one rule, so a graph and the metadata recorded for it separate the same values.
Objects with no value semantics are keyed by their type only, so a fresh instance per
call does not make a graph per call.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from typing import Any

import torch

_PRIMITIVES = (bool, int, float, str, bytes, type(None))
_type_names: dict[type, str] = {}


def type_name(cls: type) -> str:
    name = _type_names.get(cls)
    if name is None:
        name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        _type_names[cls] = name
    return name


def leaf_value_key(value: Any) -> Hashable:
    """The key of a non-tensor leaf in strict mode."""
    cls = type(value)
    if cls in _PRIMITIVES:
        return ("V", cls.__name__, value)
    if isinstance(value, enum.Enum):
        return ("V", type_name(cls), value.name)
    if isinstance(value, (torch.dtype, torch.device)):
        return ("V", type_name(cls), str(value))
    return ("O", type_name(cls))
