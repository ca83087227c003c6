"""Graph keying through aitune_core.Module: which recorded calls share an execution graph."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core import log
from aitune_core.graphs import graph_key

Call = Callable[..., Any]


class Masked(nn.Module):
    """forward(x, mask=False): the seed's example signature."""

    def forward(self, x: torch.Tensor, mask: bool = False) -> torch.Tensor:
        return x * 2 if mask else x + 1


class Sampler(nn.Module):
    def forward(self, x: torch.Tensor, mode: str = "train", temperature: float = 1.0) -> torch.Tensor:
        out = x / temperature
        return out.softmax(-1) if mode == "eval" else out


@pytest.fixture
def masked(unique_name: Callable[[str], str]) -> ait.Module:
    return ait.Module(Masked(), unique_name("masked"))


@pytest.fixture
def sampler(unique_name: Callable[[str], str]) -> ait.Module:
    return ait.Module(Sampler(), unique_name("sampler"))


def names(module: ait.Module) -> list[str]:
    return [graph.name for graph in module.graph_specs]


def shapes(meta: ait.SampleMetadata) -> dict[str, list[int | str]]:
    return {loc.display_path: spec.shape for loc, spec in meta.tensor_data}


def test_same_parameters_positional_or_keyword_share_a_graph(masked: ait.Module, at_batch: Call) -> None:
    x = torch.randn(1, 10)
    at_batch(masked, 1, x, True)
    at_batch(masked, 1, x, mask=True)
    at_batch(masked, 1, x=x, mask=True)
    at_batch(masked, 1, mask=True, x=x)
    assert names(masked) == ["0"]
    graph = masked.graph_specs[0]
    assert graph.input_spec.num_samples == 4
    assert [(loc.display_path, value) for loc, value in graph.input_spec.other_data] == [("mask", True)]


def test_omitted_parameter_is_a_different_graph(masked: ait.Module, at_batch: Call) -> None:
    x = torch.randn(1, 10)
    at_batch(masked, 1, x, True)
    at_batch(masked, 1, x)
    at_batch(masked, 1, x, False)  # the default, but supplied: another structure again
    at_batch(masked, 1, x=x)
    assert names(masked) == ["0", "1", "2"]
    assert [graph.input_spec.num_samples for graph in masked.graph_specs] == [1, 2, 1]


def test_extra_parameter_is_a_different_graph(sampler: ait.Module, at_batch: Call) -> None:
    x = torch.randn(2, 4)
    at_batch(sampler, 2, x)
    at_batch(sampler, 2, x, temperature=2.0)
    at_batch(sampler, 2, x, "train", 2.0)
    assert names(sampler) == ["0", "1", "2"]  # mode supplied in the third call
    assert [loc.display_path for loc, _ in sampler.graph_specs[2].input_spec.other_data] == ["mode", "temperature"]


def test_different_rank_is_a_different_graph(masked: ait.Module, at_batch: Call) -> None:
    at_batch(masked, 1, torch.randn(1, 10))
    at_batch(masked, 1, torch.randn(1, 10, 5))
    at_batch(masked, 2, torch.randn(2, 10))
    assert names(masked) == ["0", "1"]
    assert shapes(masked.graph_specs[0].input_spec) == {"x": ["batch0", 10]}
    assert shapes(masked.graph_specs[1].input_spec) == {"x": [1, 10, 5]}


def test_same_rank_different_sizes_share_a_graph_with_batch_and_dynamic_axes(
    masked: ait.Module, at_batch: Call
) -> None:
    at_batch(masked, 1, torch.randn(1, 10, 512))
    at_batch(masked, 2, torch.randn(2, 50, 512))
    at_batch(masked, 4, torch.randn(4, 20, 512))
    assert names(masked) == ["0"]
    graph = masked.graph_specs[0]
    assert shapes(graph.input_spec) == {"x": ["batch0", "dim1", 512]}
    assert shapes(graph.output_spec) == {"output": ["batch0", "dim1", 512]}
    spec = graph.input_spec.tensor_data[0][1]
    assert (spec.min_shape, spec.max_shape) == ([1, 10, 512], [4, 50, 512])
    assert graph.batch_range == (1, 4)
    assert graph.shapes("opt") == {"x": [4, 30, 512]}


def test_strict_mode_different_non_tensor_values_are_different_graphs(sampler: ait.Module, at_batch: Call) -> None:
    x = torch.randn(2, 4)
    at_batch(sampler, 2, x, mode="train")
    at_batch(sampler, 2, x, mode="eval")
    at_batch(sampler, 2, x, "eval")
    assert names(sampler) == ["0", "1"]
    assert [graph.input_spec.other_data[0][1] for graph in sampler.graph_specs] == ["train", "eval"]


def test_bool_and_int_values_are_different_in_strict_mode(masked: ait.Module, at_batch: Call) -> None:
    x = torch.randn(1, 3)
    at_batch(masked, 1, x, True)
    at_batch(masked, 1, x, 1)
    assert names(masked) == ["0", "1"]


def test_non_strict_mode_ignores_non_tensor_values(sampler: ait.Module, at_batch: Call) -> None:
    ait.config.strict_mode = False
    x = torch.randn(2, 4)
    at_batch(sampler, 2, x, mode="train")
    at_batch(sampler, 2, x, mode="eval")
    at_batch(sampler, 2, x, mode="eval", temperature=3.0)
    assert names(sampler) == ["0", "1"]  # the structure still counts: temperature was supplied
    assert sampler.graph_specs[0].input_spec.other_data == []


def test_dtype_is_part_of_the_key(masked: ait.Module, at_batch: Call) -> None:
    at_batch(masked, 1, torch.randn(1, 4))
    out = at_batch(masked, 1, torch.randn(1, 4).half())
    at_batch(masked, 2, torch.randn(2, 4))
    assert out.dtype == torch.float16
    assert names(masked) == ["0", "1"]
    assert [graph.input_spec.tensor_data[0][1].dtype for graph in masked.graph_specs] == [
        torch.float32,
        torch.float16,
    ]
    assert masked.graph_specs[0].input_spec.num_samples == 2


def test_device_type_is_part_of_the_key(masked: ait.Module, at_batch: Call) -> None:
    at_batch(masked, 1, torch.randn(1, 4))
    at_batch(masked, 1, torch.empty(1, 4, device="meta"))
    assert names(masked) == ["0", "1"]


def test_container_structure_is_part_of_the_key(unique_name: Callable[[str], str], at_batch: Call) -> None:
    Pair = collections.namedtuple("Pair", ["a", "b"])

    @dataclasses.dataclass
    class Batch:
        ids: torch.Tensor

    class Anything(nn.Module):
        def forward(self, value: Any) -> int:
            return 0

    module = ait.Module(Anything(), unique_name("anything"))
    t = torch.ones(1)
    calls = [[t, t], (t, t), Pair(t, t), {"a": t, "b": t}, {"b": t, "a": t}, Batch(t), [t], [], {}]
    for value in calls:
        at_batch(module, 1, value)
    at_batch(module, 1, [torch.ones(3), torch.ones(5)])  # same structure as the first call
    assert names(module) == [str(i) for i in range(len(calls))]
    assert module.graph_specs[0].input_spec.num_samples == 2


def test_graph_names_follow_recording_order(masked: ait.Module, at_batch: Call) -> None:
    at_batch(masked, 1, torch.randn(1, 2, 3))
    at_batch(masked, 1, torch.randn(1, 2))
    at_batch(masked, 1, torch.randn(1, 2), True)
    at_batch(masked, 1, torch.randn(1, 2, 3))
    assert names(masked) == ["0", "1", "2"]
    assert [graph.input_spec.tensor_data[0][1].rank for graph in masked.graph_specs] == [3, 2, 2]


def test_unsupported_object_is_keyed_by_type_not_identity(unique_name: Callable[[str], str], at_batch: Call) -> None:
    class Config:
        pass

    class Other:
        pass

    class WithConfig(nn.Module):
        def forward(self, x: torch.Tensor, cfg: Any) -> torch.Tensor:
            return x

    module = ait.Module(WithConfig(), unique_name("with-config"))
    x = torch.ones(1)
    for _ in range(3):
        at_batch(module, 1, x, Config())
    at_batch(module, 1, x, Other())
    assert names(module) == ["0", "1"]


def test_new_float_every_call_is_capped_with_one_warning(sampler: ait.Module, at_batch: Call) -> None:
    reference = Sampler()
    x = torch.randn(2, 4)
    with log.capture() as events:
        for step in range(20):
            temperature = 1.0 + step / 10
            out = at_batch(sampler, 2, x, temperature=temperature)
            torch.testing.assert_close(out, reference(x, temperature=temperature), rtol=0, atol=0)
        # values already seen still record into their graphs
        at_batch(sampler, 4, torch.randn(4, 4), temperature=1.0)
    assert ait.config.max_distinct_values_per_argument == 8
    assert names(sampler) == [str(i) for i in range(8)]
    assert sampler.graph_specs[0].input_spec.num_samples == 2
    warnings = [event for event in events if event["log_level"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["argument"] == "temperature"
    assert "temperature" in warnings[0]["hint"]


def test_value_cap_follows_config_and_counts_each_argument(sampler: ait.Module, at_batch: Call) -> None:
    ait.config.max_distinct_values_per_argument = 2
    x = torch.randn(2, 4)
    with log.capture() as events:
        for temperature in (1.0, 2.0, 3.0, 4.0):
            at_batch(sampler, 2, x, "eval", temperature)
        for mode in ("a", "b", "c"):
            at_batch(sampler, 2, x, mode, 1.0)
    assert len(sampler.graph_specs) == 3  # (eval, 1.0), (eval, 2.0), (a, 1.0)
    assert [event["argument"] for event in events if event["log_level"] == "warning"] == ["temperature", "mode"]


def test_value_cap_does_not_apply_in_non_strict_mode(sampler: ait.Module, at_batch: Call) -> None:
    ait.config.strict_mode = False
    x = torch.randn(2, 4)
    with log.capture() as events:
        for step in range(20):
            at_batch(sampler, 2, x, temperature=1.0 + step)
    assert names(sampler) == ["0"]
    assert sampler.graph_specs[0].input_spec.num_samples == 20
    assert [event for event in events if event["log_level"] == "warning"] == []


def test_graph_key_is_hashable_and_ignores_sizes() -> None:
    small = graph_key({"x": torch.ones(1, 3), "n": 3}, strict=True)
    large = graph_key({"x": torch.ones(8, 5), "n": 3}, strict=True)
    assert small == large and hash(small) == hash(large)
    assert graph_key({"x": torch.ones(1, 3), "n": 4}, strict=True) != small
    loose = graph_key({"x": torch.ones(1, 3), "n": 4}, strict=False)
    assert loose == graph_key({"x": torch.ones(2, 3), "n": 3}, strict=False)
    assert loose != graph_key({"x": torch.ones(2), "n": 3}, strict=False)
    assert loose != graph_key({"x": torch.ones(2, 3, dtype=torch.int32), "n": 3}, strict=False)
