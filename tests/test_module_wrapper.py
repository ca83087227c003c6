"""aitune_core.Module: recording, stored samples, and behaving exactly like the wrapped module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.module import MODULE_REGISTRY, ModuleState

Call = Callable[..., Any]
Name = Callable[[str], str]


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 3)
        self.register_buffer("offset", torch.arange(3.0))
        self.register_buffer("scratch", torch.zeros(1), persistent=False)
        self.scale = 2.0

    def forward(self, x: torch.Tensor, bias: bool = True) -> torch.Tensor:
        out = self.fc2(self.act(self.fc1(x))) * self.scale
        return out + self.offset if bias else out


class Parent(nn.Module):
    def __init__(self, child: nn.Module) -> None:
        super().__init__()
        self.child = child
        self.head = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.child(x))


class AddInPlace(nn.Module):
    def forward(self, x: torch.Tensor, extra: list[torch.Tensor]) -> torch.Tensor:
        x.add_(1)
        extra[0].mul_(10)
        return x + extra[0]


def samples(module: ait.Module) -> list[list[Any]]:
    return [record.samples for record in module.graphs.values()]


# ---------------------------------------------------------------------- recording


def test_new_wrapper_records_and_exposes_graph_specs(unique_name: Name, at_batch: Call) -> None:
    module = ait.Module(Mlp(), unique_name("mlp"))
    assert module.state is ModuleState.RECORDING
    assert module.graph_specs == []
    at_batch(module, 1, torch.randn(1, 4))
    at_batch(module, 3, torch.randn(3, 4))
    at_batch(module, 2, torch.randn(2, 4), bias=False)
    assert [graph.name for graph in module.graph_specs] == ["0", "1"]
    first = module.graph_specs[0]
    assert [(loc.display_path, spec.shape) for loc, spec in first.input_spec.tensor_data] == [("x", ["batch0", 4])]
    assert [(loc.display_path, spec.shape) for loc, spec in first.output_spec.tensor_data] == [
        ("output", ["batch0", 3])
    ]
    assert str(first).startswith("Name=0\nInput_spec:\nTensors:\n")


def test_records_before_the_forward_mutates_its_inputs(unique_name: Name, at_batch: Call) -> None:
    module = ait.Module(AddInPlace(), unique_name("in-place"))
    x, extra = torch.zeros(2, 3), [torch.ones(2, 3)]
    out = at_batch(module, 2, x, extra)
    assert torch.equal(x, torch.ones(2, 3)) and torch.equal(extra[0], torch.full((2, 3), 10.0))
    assert torch.equal(out, torch.full((2, 3), 11.0))
    (sample,) = samples(module)[0]
    assert torch.equal(sample.arguments["x"], torch.zeros(2, 3))
    assert torch.equal(sample.arguments["extra"][0], torch.ones(2, 3))
    assert sample.batch_size == 2


def test_stored_samples_are_cpu_copies(unique_name: Name, at_batch: Call) -> None:
    module = ait.Module(Mlp(), unique_name("mlp"))
    x = torch.randn(2, 4, requires_grad=True)
    at_batch(module, 2, x)
    (sample,) = samples(module)[0]
    stored = sample.arguments["x"]
    assert stored.device.type == "cpu"
    assert stored.data_ptr() != x.data_ptr() and not stored.requires_grad
    assert torch.equal(stored, x.detach())


def test_keeps_at_most_max_num_samples_stored_per_graph(unique_name: Name, at_batch: Call) -> None:
    ait.config.max_num_samples_stored = 1
    module = ait.Module(Mlp(), unique_name("mlp"))
    for batch in (1, 1, 1):
        at_batch(module, batch, torch.randn(batch, 4))
    at_batch(module, 1, torch.randn(1, 4), False)
    assert [len(kept) for kept in samples(module)] == [1, 1]
    assert samples(module)[0][0].arguments["x"].shape == (1, 4)
    assert module.graph_specs[0].input_spec.num_samples == 3

    ait.config.max_num_samples_stored = 3
    other = ait.Module(Mlp(), unique_name("mlp"))
    for batch in (1, 1, 1, 1, 2, 2, 4):
        at_batch(other, batch, torch.randn(batch, 4))
    # Past the limit, one sample is still kept per new batch size: validation checks every size tuned with.
    assert [[s.batch_size for s in kept] for kept in samples(other)] == [[1, 1, 1, 2, 4]]


def test_records_without_a_batch_size_in_the_context(unique_name: Name) -> None:
    module = ait.Module(Mlp(), unique_name("mlp"))
    module(torch.randn(1, 4))
    module(torch.randn(2, 4))
    assert module.graph_specs[0].input_spec.tensor_data[0][1].shape == ["dim0", 4]


def test_zero_dimensional_and_none_arguments(unique_name: Name, at_batch: Call) -> None:
    class Gate(nn.Module):
        def forward(self, x: torch.Tensor, scale: torch.Tensor, mask: Any = None) -> torch.Tensor:
            return x * scale if mask is None else x * scale * mask

    module = ait.Module(Gate(), unique_name("gate"))
    out = at_batch(module, 1, torch.ones(1, 2), torch.tensor(3.0), None)
    at_batch(module, 2, torch.ones(2, 2), torch.tensor(4.0), None)
    assert torch.equal(out, torch.full((1, 2), 3.0))
    assert len(module.graph_specs) == 1
    spec = module.graph_specs[0].input_spec
    assert [(loc.display_path, s.shape) for loc, s in spec.tensor_data] == [("x", ["batch0", 2]), ("scale", [])]
    assert [(loc.display_path, value) for loc, value in spec.other_data] == [("mask", None)]


def test_records_meta_device_tensors(unique_name: Name, at_batch: Call) -> None:
    module = ait.Module(nn.Linear(4, 3, device="meta"), unique_name("meta-linear"))
    out = at_batch(module, 1, torch.empty(1, 4, device="meta"))
    at_batch(module, 8, torch.empty(8, 4, device="meta"))
    assert out.is_meta and out.shape == (1, 3)
    graph = module.graph_specs[0]
    assert [(loc.display_path, s.shape) for loc, s in graph.input_spec.tensor_data] == [("input", ["batch0", 4])]
    assert graph.output_spec.tensor_data[0][1].shape == ["batch0", 3]
    assert samples(module)[0][0].arguments["input"].is_meta


def test_unsupported_argument_object_is_recorded_as_a_leaf(unique_name: Name, at_batch: Call) -> None:
    class Options:
        factor = 3.0

    class UsesOptions(nn.Module):
        def forward(self, x: torch.Tensor, options: Options) -> torch.Tensor:
            return x * options.factor

    module = ait.Module(UsesOptions(), unique_name("options"))
    options = Options()
    out = at_batch(module, 1, torch.ones(1, 2), options)
    assert torch.equal(out, torch.full((1, 2), 3.0))
    (sample,) = samples(module)[0]
    # Kept as a copy: a forward that changed the object later must not change the stored sample.
    stored = sample.arguments["options"]
    assert type(stored) is Options and stored is not options and stored.factor == 3.0


def test_ten_thousand_tensor_leaves(unique_name: Name, at_batch: Call) -> None:
    class Count(nn.Module):
        def forward(self, xs: list[torch.Tensor]) -> int:
            return len(xs)

    module = ait.Module(Count(), unique_name("count"))
    assert at_batch(module, 1, [torch.zeros(1, 2) for _ in range(10_000)]) == 10_000
    at_batch(module, 2, [torch.zeros(2, 2) for _ in range(10_000)])
    (graph,) = module.graph_specs
    assert len(graph.input_spec.tensor_data) == 10_000
    assert graph.input_spec.tensor_data[9_999][1].shape == ["batch0", 2]
    assert len(samples(module)[0][0].arguments["xs"]) == 10_000


def test_error_while_recording_names_the_module(unique_name: Name, at_batch: Call) -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] > 1:
                raise RuntimeError("batch too large")
            return x

    name = unique_name("fails")
    module = ait.Module(Fails(), name)
    with pytest.raises(RuntimeError, match="batch too large") as first:
        at_batch(module, 2, torch.ones(2, 1))
    assert any(f"`{name}`" in note and "graph 0" in note for note in first.value.__notes__)
    assert module.graph_specs == []  # a failed call creates no graph
    at_batch(module, 1, torch.ones(1, 1))
    with pytest.raises(RuntimeError) as again:
        at_batch(module, 3, torch.ones(3, 1))
    assert any(f"`{name}`" in note for note in again.value.__notes__)
    assert module.graph_specs[0].input_spec.num_samples == 1


def test_inactive_module_runs_the_original_unrecorded(unique_name: Name, at_batch: Call) -> None:
    module = ait.Module(Mlp(), unique_name("mlp"))
    module.deactivate()
    assert module.state is ModuleState.INACTIVE
    at_batch(module, 1, torch.randn(1, 4))
    assert module.graph_specs == []
    module.activate()
    assert module.state is ModuleState.RECORDING


# ---------------------------------------------------------------------- behaves like the original


def test_outputs_equal_the_original(unique_name: Name, at_batch: Call) -> None:
    inner = Mlp()
    module = ait.Module(inner, unique_name("mlp"))
    x = torch.randn(5, 4)
    torch.testing.assert_close(at_batch(module, 5, x), inner(x), rtol=0, atol=0)
    torch.testing.assert_close(module(x, bias=False), inner(x, False), rtol=0, atol=0)


def test_state_dict_keys_are_identical(unique_name: Name) -> None:
    inner = Mlp()
    expected = list(inner.state_dict())
    module = ait.Module(inner, unique_name("mlp"))
    assert list(module.state_dict()) == expected
    assert "scratch" not in expected
    assert [name for name, _ in module.named_parameters()] == [name for name, _ in inner.named_parameters()]

    plain, wrapped = Parent(Mlp()), Parent(ait.Module(Mlp(), unique_name("child")))
    assert list(wrapped.state_dict()) == list(plain.state_dict())
    assert "child.fc1.weight" in wrapped.state_dict()


def test_load_state_dict_through_the_parent(unique_name: Name) -> None:
    source = Parent(Mlp())
    target = Parent(ait.Module(Mlp(), unique_name("child")))
    result = target.load_state_dict(source.state_dict())
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    inner = target.child.module
    assert torch.equal(inner.fc1.weight, source.child.fc1.weight)
    assert torch.equal(inner.offset, source.child.offset)
    x = torch.randn(2, 4)
    torch.testing.assert_close(target(x), source(x), rtol=0, atol=0)
    assert len(target.child.graph_specs) == 1  # the parent's call went through the wrapper


def test_attribute_reads_and_writes_reach_the_inner_module(unique_name: Name) -> None:
    inner = Mlp()
    module = ait.Module(inner, unique_name("mlp"))
    assert module.scale == 2.0 and module.fc1 is inner.fc1 and module.offset is inner.offset
    module.scale = 5.0
    assert inner.scale == 5.0
    module.label = "new"
    assert inner.label == "new" and "label" not in module.__dict__
    module.fc3 = nn.Linear(1, 1)
    assert inner.fc3 is module.fc3
    del module.label
    assert not hasattr(inner, "label")
    x = torch.randn(1, 4)
    torch.testing.assert_close(module(x), inner(x), rtol=0, atol=0)
    with pytest.raises(AttributeError):
        _ = module.does_not_exist
    assert "fc1" in dir(module) and "graph_specs" in dir(module)


def test_module_property_is_the_inner_module(unique_name: Name) -> None:
    inner = Mlp()
    module = ait.Module(inner, unique_name("mlp"))
    assert module.module is inner


def test_train_and_eval_reach_the_inner_training_flag(unique_name: Name) -> None:
    inner = Mlp()
    module = ait.Module(inner, unique_name("mlp"))
    assert module.eval() is module
    assert inner.training is False and module.training is False and inner.fc1.training is False
    module.train()
    assert inner.training is True and module.training is True and inner.fc1.training is True
    parent = Parent(module)
    parent.eval()
    assert inner.training is False


def test_wrapped_module_starts_with_the_inner_training_flag(unique_name: Name) -> None:
    inner = Mlp().eval()
    assert ait.Module(inner, unique_name("mlp")).training is False


def test_hooks_registered_on_the_wrapper_run(unique_name: Name) -> None:
    inner = Mlp()
    module = ait.Module(inner, unique_name("mlp"))
    seen: list[str] = []

    def pre_hook(mod: nn.Module, args: tuple[Any, ...]) -> None:
        seen.append(f"pre:{type(mod).__name__}")

    def hook(mod: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
        seen.append(f"post:{tuple(output.shape)}")
        return output * 0

    handles = [module.register_forward_pre_hook(pre_hook), module.register_forward_hook(hook)]
    out = module(torch.randn(2, 4))
    assert seen == ["pre:Module", "post:(2, 3)"]
    assert torch.equal(out, torch.zeros(2, 3))
    assert len(module.graph_specs) == 1
    for handle in handles:
        handle.remove()
    assert not torch.equal(module(torch.randn(2, 4)), torch.zeros(2, 3))
    assert len(seen) == 2


def test_hooks_on_the_inner_module_still_run(unique_name: Name) -> None:
    inner = Mlp()
    calls: list[int] = []
    inner.register_forward_hook(lambda mod, args, out: calls.append(1))
    module = ait.Module(inner, unique_name("mlp"))
    module(torch.randn(1, 4))
    assert calls == [1]


def test_to_moves_the_shared_parameters(unique_name: Name) -> None:
    inner = Mlp()
    module = ait.Module(inner, unique_name("mlp"))
    module.to(torch.float64)
    assert inner.fc1.weight.dtype == torch.float64 and inner.offset.dtype == torch.float64
    assert module(torch.randn(1, 4, dtype=torch.float64)).dtype == torch.float64


# ---------------------------------------------------------------------- names and construction


def test_two_modules_with_the_same_name_raise(unique_name: Name) -> None:
    name = unique_name("dup")
    first = ait.Module(Mlp(), name)
    with pytest.raises(ValueError, match=rf"an aitune module named '{name}' already exists.*unique name"):
        ait.Module(nn.Linear(1, 1), name)
    assert MODULE_REGISTRY.modules[name] is first


def test_name_is_freed_when_the_wrapper_is_gone(unique_name: Name) -> None:
    name = unique_name("freed")
    module = ait.Module(Mlp(), name)
    module(torch.randn(1, 4))
    assert name in MODULE_REGISTRY.modules
    del module
    assert name not in MODULE_REGISTRY.modules
    ait.Module(Mlp(), name)


def test_constructor_rejects_bad_arguments(unique_name: Name) -> None:
    with pytest.raises(TypeError, match=r"wraps a torch\.nn\.Module"):
        ait.Module(lambda x: x, unique_name("fn"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty string"):
        ait.Module(Mlp(), "  ")
    wrapped = ait.Module(Mlp(), unique_name("once"))
    with pytest.raises(TypeError, match="already an aitune module"):
        ait.Module(wrapped, unique_name("twice"))
