"""SampleMetadata equality and hashing: two captures are equal when their inputs belong to one graph.

The execution-graphs guide calls SampleMetadata what "identifies which inputs belong to
the same graph": tensors of one rank with other sizes, and the same keyword arguments in
another order, are one graph; in strict mode, other non-tensor values are another.
``==`` and ``hash`` say the same as the graph key (:func:`aitune_core.graphs.graph_key`).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from aitune_core import SampleMetadata
from aitune_core.graphs import graph_key
from aitune_core.graphs.spec_data import MetadataData


def meta(inputs: dict[str, Any], strict: bool = False) -> SampleMetadata:
    return SampleMetadata.from_inputs(inputs, strict=strict)


def test_same_rank_other_sizes_is_one_graph() -> None:
    small = meta({"x": torch.randn(1, 3), "mask": torch.ones(1, 3, dtype=torch.bool)}, strict=True)
    large = meta({"x": torch.randn(8, 5), "mask": torch.ones(8, 5, dtype=torch.bool)}, strict=True)
    assert small == large and hash(small) == hash(large)
    assert len({small, large}) == 1


def test_keyword_arguments_in_another_order_are_one_graph() -> None:
    x, scale = torch.randn(2, 4), torch.randn(1)
    forward_order = meta({"x": x, "scale": scale, "mode": "eval"}, strict=True)
    other_order = meta({"mode": "eval", "scale": scale, "x": x}, strict=True)
    assert forward_order == other_order and hash(forward_order) == hash(other_order)


def test_rank_dtype_and_paths_separate_graphs() -> None:
    base = meta({"x": torch.randn(2, 4)})
    assert base != meta({"x": torch.randn(2, 4, 1)})
    assert base != meta({"x": torch.randn(2, 4, dtype=torch.float16)})
    assert base != meta({"y": torch.randn(2, 4)})
    assert base != meta({"x": [torch.randn(2, 4)]})
    assert base != SampleMetadata.from_outputs(torch.randn(2, 4))
    assert base != "x" and base is not None


def test_strict_mode_still_separates_non_tensor_values() -> None:
    x = torch.randn(2, 4)
    train, evaluate = meta({"x": x, "mode": "train"}, strict=True), meta({"x": x, "mode": "eval"}, strict=True)
    assert train != evaluate
    assert meta({"x": x, "flag": True}, strict=True) != meta({"x": x, "flag": 1}, strict=True)  # as the key: bool
    assert meta({"x": x, "mode": "train"}) == meta({"x": x, "mode": "eval"})  # not strict: values are not kept


CALLS: list[dict[str, Any]] = [
    {"x": torch.randn(1, 4)},
    {"x": torch.randn(3, 7)},
    {"x": torch.randn(1, 4, 2)},
    {"x": torch.randn(1, 4, dtype=torch.float64)},
    {"x": torch.randn(1, 4), "mode": "train"},
    {"x": torch.randn(6, 4), "mode": "train"},
    {"x": torch.randn(1, 4), "mode": "eval"},
    {"x": torch.randn(1, 4), "extra": {"a": torch.randn(2), "b": torch.randn(3)}},
    {"x": torch.randn(2, 4), "extra": {"a": torch.randn(5), "b": torch.randn(1)}},
    {"x": torch.randn(1, 4), "extra": {"b": torch.randn(3), "a": torch.randn(2)}},
    {"x": torch.randn(1, 4), "extra": [torch.randn(2), torch.randn(3)]},
]
"""Calls of ``forward(x, mode=..., extra=...)``, normalised (parameter order), with the parameters they supply."""


@pytest.mark.parametrize("strict", [True, False])
def test_equality_and_hash_agree_with_the_graph_key(strict: bool) -> None:
    for a, b in itertools.product(CALLS, repeat=2):
        if not strict and ("mode" in a) != ("mode" in b):
            continue  # non-tensor values are not kept out of strict mode, so neither is whether one was given
        same_graph = graph_key(a, strict) == graph_key(b, strict)
        assert (meta(a, strict) == meta(b, strict)) is same_graph, (list(a), list(b))
        if same_graph:
            assert hash(meta(a, strict)) == hash(meta(b, strict))


def test_identity_survives_widening_copying_and_a_checkpoint() -> None:
    first = meta({"x": torch.randn(1, 4), "mode": "eval"}, strict=True)
    before = hash(first)
    first.update_shapes_seen(meta({"x": torch.randn(4, 9), "mode": "eval"}, strict=True))
    assert hash(first) == before  # usable as a dict key while it learns shapes
    assert first.copy() == first
    restored = MetadataData.of(first).metadata()
    assert restored == first and hash(restored) == before
