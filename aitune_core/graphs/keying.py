"""Graph keys: which calls of a module share one execution graph.

A key is a nested tuple of plain values (strings, numbers, dtypes), so it hashes fast,
and it can be written to a checkpoint. It captures:

* the parameters supplied (a parameter left at its default is a different structure);
* the container structure around every value, with container type names and dict keys;
* for each tensor: rank, dtype and device type. Sizes are *not* in the key: tensors of
  one rank with other sizes share a graph, whose spec tracks the ranges;
* in strict mode, the value of every non-tensor leaf: ``mode="train"`` and
  ``mode="eval"`` are different graphs (:func:`~aitune_core.metadata.leaf_key.leaf_value_key`,
  the rule :class:`SampleMetadata` equality uses too).

This runs on every tuned call, so it avoids locators and allocates little.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch

from aitune_core.metadata.containers import CONTAINERS
from aitune_core.metadata.leaf_key import leaf_value_key, type_name


def tensor_key(value: torch.Tensor) -> Hashable:
    """A tensor's part of a key: rank, dtype and device type."""
    return ("T", value.dim(), value.dtype, "cpu" if value.is_cpu else value.device.type)


def value_key(value: Any, strict: bool) -> Hashable:
    if isinstance(value, torch.Tensor):
        return tensor_key(value)
    cls = type(value)
    if cls is tuple or cls is list:
        return (cls.__name__, tuple([value_key(item, strict) for item in value]))
    if cls is dict:
        return ("dict", tuple([(k, value_key(v, strict)) for k, v in value.items()]))
    container = CONTAINERS.lookup(cls)
    if container is not None:
        return (type_name(cls), tuple([(step, value_key(child, strict)) for step, child in container.flatten(value)]))
    return leaf_value_key(value) if strict else None


def graph_key(arguments: dict[str, Any], strict: bool) -> tuple[Hashable, ...]:
    """The graph key of a normalised call (see :class:`ForwardSignature`)."""
    return tuple([(name, value_key(value, strict)) for name, value in arguments.items()])
