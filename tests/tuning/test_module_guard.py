"""Tuning leaves the user's module as it was: candidates that change it fail, and it is put back.

The backends here do what real ones have been caught doing: scale weights in place,
fold BatchNorm into a convolution in place, swap a Parameter, call ``.train()`` on a
submodule. Each is a failed row naming the change, and the model comes back bit for bit.
"""

from __future__ import annotations

import contextlib
import copy
import re
from typing import Any

import attrs
import pytest
import torch
from torch import nn
from tuning_helpers import FAST_PROFILE

import aitune_core as ait
from aitune_core.backends import TorchEagerBackend
from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.guard import ModuleChangedError, ModuleGuard, ModuleSnapshot, TrainingModeError
from aitune_core.log import capture
from aitune_core.profiling.timer import EAGER, ScriptedTimer
from aitune_core.strategies import FirstWinsStrategy, MaxThroughputStrategy, TuneStrategy
from aitune_core.tuning import tune


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4)).eval()


def convnet() -> nn.Sequential:
    """Conv, BatchNorm with real statistics, ReLU: the shape BatchNorm folding applies to."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU())
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.randn(8, 3, 10, 10) * 3 + 1)
    return model.eval()


def vectors(count: int = 6, width: int = 16) -> list[torch.Tensor]:
    return [torch.randn(width) for _ in range(count)]


def images(count: int = 4) -> list[torch.Tensor]:
    return [torch.randn(3, 10, 10) for _ in range(count)]


def state_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict(keep_vars=True).items()}


def assert_bit_exact(model: nn.Module, saved: dict[str, torch.Tensor]) -> None:
    now = model.state_dict()
    assert now.keys() == saved.keys()
    for name, tensor in saved.items():
        assert torch.equal(now[name], tensor), f"{name} differs from before tuning"


def rows(report: Any) -> dict[str, Any]:
    return {row.backend: row for row in report.graphs[0].candidates}


# --------------------------------------------------------------------------- backends that edit the module
@attrs.frozen
class EditConfig(BackendConfig):
    pass


class _Editing(Backend):
    """Edits ``context.module`` in :meth:`edit` while building, then serves a copy of it."""

    config_class = EditConfig

    def edit(self, module: nn.Module) -> None:
        raise NotImplementedError

    def _build(self, context: BuildContext) -> None:
        self.edit(context.module)
        self.served = copy.deepcopy(context.module)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self.served(*args, **kwargs)


class ScalesWeightsInPlace(_Editing):
    name = "test_scales_in_place"

    def edit(self, module: nn.Module) -> None:
        with torch.no_grad():
            module[0].weight.mul_(2)


class ScalesWeightsThroughData(_Editing):
    """The same edit through ``.data``, which no version counter sees."""

    name = "test_scales_through_data"

    def edit(self, module: nn.Module) -> None:
        module[0].weight.data.mul_(2)


class FoldsBatchNormInPlace(_Editing):
    """Folds the BatchNorm into the convolution of the user's own module, as careless fusion code does."""

    name = "test_folds_bn_in_place"

    def edit(self, module: nn.Module) -> None:
        conv, bn = module[0], module[1]
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        with torch.no_grad():
            conv.weight.mul_(scale.view(-1, 1, 1, 1))
        conv.bias = nn.Parameter((bn.bias - bn.running_mean * scale).detach())
        module[1] = nn.Identity()


class SwapsParameter(_Editing):
    name = "test_swaps_parameter"

    def edit(self, module: nn.Module) -> None:
        module[0].weight = nn.Parameter(module[0].weight.detach().clone())


class FlipsToTraining(_Editing):
    name = "test_flips_to_training"

    def edit(self, module: nn.Module) -> None:
        module[2].train()


class Interrupted(_Editing):
    """Switches the model to training mode, then the user presses Ctrl-C."""

    name = "test_interrupted"

    def edit(self, module: nn.Module) -> None:
        module.train()
        raise KeyboardInterrupt


class EditsOnDeactivate(_Editing):
    """Builds cleanly and serves correct (slow) results, but scales the weights when released."""

    name = "test_edits_on_deactivate"

    def edit(self, module: nn.Module) -> None:
        self.module = module

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._infer(*args, **kwargs)
        for _ in range(20):
            out = out + 0.0 * super()._infer(*args, **kwargs)  # correct, and slower than eager
        return out

    def _deactivate(self) -> None:
        with torch.no_grad():
            self.module[0].bias.add_(1)


# --------------------------------------------------------------------------- tuning with them
@pytest.mark.parametrize(
    ("backend", "change"),
    [
        (ScalesWeightsInPlace(), "0.weight was modified in place (version"),
        (ScalesWeightsThroughData(), "0.weight was overwritten through .data"),
    ],
    ids=["in-place", "through-data"],
)
def test_scaling_the_users_weights_fails_the_candidate_and_is_undone(unique_name, backend, change):
    model = mlp()
    saved = state_copy(model)
    reference = copy.deepcopy(model)
    parameters = list(model.parameters())
    module = ait.Module(model, unique_name("encoder"))
    strategy = MaxThroughputStrategy([backend, TorchEagerBackend()], profile=FAST_PROFILE)
    report = tune(module, vectors(), batch_sizes=[1, 4], strategy=strategy)

    row = rows(report)[backend.describe()]
    assert (row.status, row.stage) == ("failed", "build")
    assert row.reason.startswith("changed the user's module during build: ")
    assert f"{module.name}.{change}" in row.reason
    assert_bit_exact(model, saved)
    assert all(now is before for now, before in zip(model.parameters(), parameters, strict=True))
    assert isinstance(module.backends["0"], TorchEagerBackend)
    x = torch.randn(3, 16)
    assert torch.equal(module(x), reference(x))


def test_folding_batchnorm_in_place_fails_and_the_model_is_whole_again(unique_name):
    model = convnet()
    saved = state_copy(model)
    conv, bn = model[0], model[1]
    x = torch.randn(2, 3, 10, 10)
    expected = model(x)
    module = ait.Module(model, unique_name("convnet"))
    strategy = MaxThroughputStrategy([FoldsBatchNormInPlace(), TorchEagerBackend()], profile=FAST_PROFILE)
    report = tune(module, images(), batch_sizes=[1, 2], strategy=strategy)

    row = rows(report)["FoldsBatchNormInPlace()"]
    assert (row.status, row.stage) == ("failed", "build")
    assert f"submodule {module.name}.1 was replaced by another Identity object" in row.reason
    assert f"parameter {module.name}.0.bias was added (Parameter)" in row.reason
    assert f"{module.name}.0.weight was modified in place" in row.reason
    assert model[0] is conv and model[1] is bn and conv.bias is None
    assert_bit_exact(model, saved)
    assert torch.equal(module(x), expected)


def test_a_swapped_parameter_is_put_back_as_the_same_object(unique_name):
    model = mlp()
    weight = model[0].weight
    module = ait.Module(model, unique_name())
    strategy = FirstWinsStrategy([SwapsParameter(), TorchEagerBackend()], profile=FAST_PROFILE)
    report = tune(module, vectors(), batch_sizes=[1, 2], strategy=strategy)

    row = rows(report)["SwapsParameter()"]
    assert (row.status, row.stage) == ("failed", "build")
    assert f"parameter {module.name}.0.weight was replaced by another Parameter object" in row.reason
    assert model[0].weight is weight and model[0]._parameters["weight"] is weight


def test_a_submodule_switched_to_training_is_switched_back(unique_name):
    model = mlp()
    module = ait.Module(model, unique_name())
    strategy = MaxThroughputStrategy([FlipsToTraining(), TorchEagerBackend()], profile=FAST_PROFILE)
    report = tune(module, vectors(), batch_sizes=[1, 2], strategy=strategy)

    row = rows(report)["FlipsToTraining()"]
    assert (row.status, row.stage) == ("failed", "build")
    assert row.reason == f"changed the user's module during build: {module.name}.2.training flipped to True"
    assert not any(m.training for m in model.modules())
    x = torch.randn(4, 16)
    assert torch.equal(module(x), module(x))  # Dropout is off


def test_a_change_on_release_fails_the_row_and_is_undone(unique_name):
    model = mlp()
    saved = state_copy(model)
    module = ait.Module(model, unique_name())
    slower = ScriptedTimer({EAGER: 1e-3}, default=2e-3)  # it loses, so it is released during tuning
    strategy = MaxThroughputStrategy([EditsOnDeactivate(), TorchEagerBackend()], profile=FAST_PROFILE, timer=slower)
    report = tune(module, vectors(), batch_sizes=[1, 2], strategy=strategy)

    row = rows(report)["EditsOnDeactivate()"]
    assert (row.status, row.stage) == ("failed", "deactivate"), row
    assert f"{module.name}.0.bias was modified in place" in row.reason
    assert_bit_exact(model, saved)


def test_the_guard_logs_what_it_put_back(unique_name):
    module = ait.Module(mlp(), unique_name())
    strategy = FirstWinsStrategy([ScalesWeightsInPlace(), TorchEagerBackend()], profile=FAST_PROFILE)
    with capture() as events:
        tune(module, vectors(), batch_sizes=[1, 2], strategy=strategy)
    restored = [e for e in events if e["event"] == "the user's module was changed and put back"]
    assert len(restored) == 1 and restored[0]["step"] == "build"
    copies = [e for e in events if e["event"] == "copy of the module's weights kept to undo candidates' edits"]
    assert len(copies) == 1


def test_one_copy_of_the_weights_per_module_however_many_graphs(unique_name, monkeypatch):
    import aitune_core.guard.guard as guard_module

    made: list[Any] = []
    original = guard_module.WeightCopy

    def counting(snapshot: ModuleSnapshot) -> Any:
        made.append(snapshot)
        return original(snapshot)

    monkeypatch.setattr(guard_module, "WeightCopy", counting)
    module = ait.Module(nn.Linear(6, 3).eval(), unique_name())
    dataset = [torch.randn(6) for _ in range(3)] + [torch.randn(2, 6) for _ in range(3)]  # two ranks: two graphs
    strategy = FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE)
    report = tune(module, dataset, strategy=strategy)
    assert len(report.graphs) == 2
    assert len(made) == 1


def test_routed_calls_never_touch_the_guard(unique_name, monkeypatch):
    module = ait.Module(mlp(), unique_name())
    tune(module, vectors(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE))
    import aitune_core.guard.guard as guard_module

    def fail(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a routed call took a snapshot")

    monkeypatch.setattr(guard_module, "ModuleSnapshot", fail)
    monkeypatch.setattr(guard_module.ModuleGuard, "step", fail)
    for batch in (1, 2):
        module(torch.randn(batch, 16))


# --------------------------------------------------------------------------- training mode
def test_a_module_in_training_mode_is_refused_before_any_call(unique_name):
    model = convnet().train()
    saved = state_copy(model)
    module = ait.Module(model, unique_name("convnet"))
    with pytest.raises(TrainingModeError, match=r"is in training mode .*call model.eval\(\) before tuning"):
        tune(module, images(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([TorchEagerBackend()]))
    assert int(model[1].num_batches_tracked) == int(saved["1.num_batches_tracked"])
    assert_bit_exact(model, saved)
    assert all(m.training for m in model.modules())  # given in training mode, returned in training mode
    assert not module.graph_specs


def test_a_partly_training_module_is_refused_naming_the_submodule(unique_name):
    model = mlp()
    model[2].train()
    module = ait.Module(model, unique_name("encoder"))
    with pytest.raises(TrainingModeError, match=rf"\({module.name}\.2\.training is True\)"):
        tune(module, vectors(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([TorchEagerBackend()]))


def test_a_module_in_training_mode_that_func_does_not_call_is_left_alone(unique_name):
    idle = ait.Module(mlp().train(), unique_name("idle"))
    module = ait.Module(mlp(), unique_name("used"))
    tune(module, vectors(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE))
    assert module.backends and idle.module.training


def test_refused_even_when_func_swallows_the_error(unique_name):
    model = convnet().train()
    saved = state_copy(model)
    module = ait.Module(model, unique_name())

    def forgiving(x: torch.Tensor) -> None:
        with contextlib.suppress(Exception):
            module(x)

    with pytest.raises(TrainingModeError):
        tune(forgiving, images(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([TorchEagerBackend()]))
    assert_bit_exact(model, saved)


def test_modes_come_back_when_a_backend_interrupts_the_tuning(unique_name):
    model = mlp()
    saved = state_copy(model)
    module = ait.Module(model, unique_name())
    strategy = FirstWinsStrategy([Interrupted(), TorchEagerBackend()], profile=FAST_PROFILE)
    with pytest.raises(KeyboardInterrupt):
        tune(module, vectors(), batch_sizes=[1, 2], strategy=strategy)
    assert not any(m.training for m in model.modules())
    assert not module.training
    assert_bit_exact(model, saved)


class TrainsThenFails(TuneStrategy):
    def _tune(self, run):  # type: ignore[no-untyped-def]
        run.session.module.train()
        raise RuntimeError("strategy gave up")


def test_modes_come_back_when_the_strategy_raises(unique_name):
    model = mlp()
    module = ait.Module(model, unique_name())
    report = tune(module, vectors(), batch_sizes=[1, 2], strategy=TrainsThenFails())
    row = report.graphs[0].selected
    assert row is not None and row.status == "fallback" and "RuntimeError: strategy gave up" in row.reason
    assert not any(m.training for m in model.modules())


# --------------------------------------------------------------------------- the guard on its own
def test_guard_names_every_kind_of_change():
    model = mlp()
    guard = ModuleGuard(model, "encoder")
    with pytest.raises(ModuleChangedError) as raised, guard.step("build"):
        with torch.no_grad():
            model[0].weight.add_(1)
        model[3].bias.data = model[3].bias.data.double()
        model[2].train()
    message = str(raised.value)
    assert message.startswith("changed the user's module during build: ")
    assert "encoder.2.training flipped to True" in message
    assert re.search(r"encoder\.0\.weight was modified in place \(version (\d+) → (\d+)\)", message)
    assert "encoder.3.bias changed dtype from float32 to float64" in message
    assert raised.value.step == "build" and len(raised.value.changes) == 3
    assert model[3].bias.dtype is torch.float32 and not model[2].training


def test_guard_keeps_the_error_of_a_step_that_raised_and_changed_the_module():
    model = mlp()
    guard = ModuleGuard(model, "m")
    with pytest.raises(ModuleChangedError) as raised, guard.step("activate"):
        model.train()
        raise ValueError("compiler exploded")
    assert isinstance(raised.value.__cause__, ValueError)
    assert not model.training


def test_guard_restores_strides_and_storage():
    model = nn.Conv2d(3, 4, 3).eval()
    weight, pointer = model.weight, model.weight.data_ptr()
    values = weight.detach().clone()
    guard = ModuleGuard(model, "conv")
    with pytest.raises(ModuleChangedError, match="memory format"), guard.step("build"):
        model.to(memory_format=torch.channels_last)
    assert model.weight is weight and weight.data_ptr() == pointer and weight.is_contiguous()
    assert torch.equal(weight, values)


def test_guard_without_changes_raises_nothing_and_tied_weights_are_named_once():
    embed = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = embed.weight
    model = nn.Sequential(embed, head).eval()
    guard = ModuleGuard(model, "lm")
    with guard.step("profile"):
        model(torch.tensor([[1, 2]]))
    with pytest.raises(ModuleChangedError) as raised, guard.step("build"), torch.no_grad():
        head.weight.mul_(3)
    (change,) = raised.value.changes
    assert re.fullmatch(r"lm\.0\.weight was modified in place \(version \d+ → \d+\)", change)
