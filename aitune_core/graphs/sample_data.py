"""Recorded samples in a checkpoint: tensors in a tensor file, structure as JSON.

JIT backends compile again when deployed and warm up on these samples. Only plain
structures (tensors, tuples, lists, dicts with string or int keys, and JSON values)
are stored: rebuilding a dataclass or another user type would mean importing a class
named by the checkpoint, which loading never does. Graphs with such samples are
saved without them and JIT backends then compile on their first call.
"""

from __future__ import annotations

from typing import Any

import torch

from aitune_core.graphs.graph_spec import Sample

_JSON_LEAVES = (str, int, float, bool, type(None))


class _Unstorable(Exception):
    pass


def encode_samples(samples: list[Sample]) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]] | str:
    """``(tensors, trees)`` for the samples, or the reason they cannot be stored."""
    tensors: dict[str, torch.Tensor] = {}

    def encode(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.is_meta:
                raise _Unstorable("it holds meta tensors")
            key = str(len(tensors))
            tensors[key] = value.detach().cpu().contiguous()
            return {"tensor": key}
        if type(value) in (tuple, list):
            return {type(value).__name__: [encode(item) for item in value]}
        if type(value) is dict:
            if not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in value):
                raise _Unstorable("a dict has keys other than strings and ints")
            return {"dict": [[k, encode(v)] for k, v in value.items()]}
        if isinstance(value, _JSON_LEAVES) and type(value) in _JSON_LEAVES:
            return {"value": value}
        raise _Unstorable(f"it holds a {type(value).__name__}")

    try:
        trees = [{"batch_size": s.batch_size, "arguments": encode(s.arguments)} for s in samples]
    except _Unstorable as reason:
        return f"samples not stored: {reason}"
    return tensors, trees


def decode_samples(tensors: dict[str, torch.Tensor], trees: list[dict[str, Any]]) -> list[Sample]:
    def decode(node: Any) -> Any:
        ((kind, value),) = node.items()
        if kind == "tensor":
            return tensors[value]
        if kind == "tuple":
            return tuple(decode(item) for item in value)
        if kind == "list":
            return [decode(item) for item in value]
        if kind == "dict":
            return {k: decode(v) for k, v in value}
        if kind == "value":
            return value
        raise ValueError(f"unknown sample node {kind!r}")

    return [Sample(decode(tree["arguments"]), tree.get("batch_size")) for tree in trees]
