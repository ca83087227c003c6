"""A re-tune that fails or is interrupted leaves the previous routes serving."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import torch
from module_helpers import WIDTH, FrozenBackend, InterruptingBackend, mlp, one, samples, tune_frozen
from torch import nn

import aitune_core as ait
from aitune_core.backends import BackendState
from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.module import ModuleState

Name = Callable[[str], str]


@attrs.frozen
class FailingConfig(BackendConfig):
    pass


class FailingBackend(Backend):
    name = "test_failing"
    config_class = FailingConfig

    def _build(self, context: BuildContext) -> None:
        raise RuntimeError("compiler exploded")

    def _infer(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("never built")


def tuned(unique_name: Name) -> tuple[nn.Module, ait.Module, FrozenBackend]:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    tune_frozen(wrapped)
    backend = wrapped.backends["0"]
    assert isinstance(backend, FrozenBackend)
    backend.calls = 0
    return model, wrapped, backend


def assert_still_routed(model: nn.Module, wrapped: ait.Module, backend: FrozenBackend) -> None:
    assert wrapped.state is ModuleState.TUNED
    assert wrapped.backends["0"] is backend and backend.state is BackendState.ACTIVE
    x = torch.randn(3, WIDTH)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x))
    assert backend.calls == 1


@pytest.mark.parametrize(
    ("blueprint", "raised"), [(InterruptingBackend, KeyboardInterrupt), (FailingBackend, RuntimeError)]
)
def test_a_re_tune_stopped_while_building_keeps_the_previous_routes(
    unique_name: Name, blueprint: type[Backend], raised: type[BaseException]
) -> None:
    model, wrapped, backend = tuned(unique_name)
    with pytest.raises(raised):
        ait.tune(wrapped, samples(), batch_sizes=[1, 4], strategy=one(blueprint()))
    assert_still_routed(model, wrapped, backend)


def test_a_re_tune_interrupted_while_gathering_keeps_the_previous_routes(unique_name: Name) -> None:
    model, wrapped, backend = tuned(unique_name)
    calls: list[int] = []

    def func(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return wrapped(x)

    with pytest.raises(KeyboardInterrupt):
        ait.tune(func, samples(), batch_sizes=[1, 4], strategy=one(FrozenBackend()))
    assert_still_routed(model, wrapped, backend)


def test_a_completed_re_tune_replaces_and_releases_the_previous_backends(unique_name: Name) -> None:
    _model, wrapped, backend = tuned(unique_name)
    tune_frozen(wrapped, [2, 4])
    assert wrapped.backends["0"] is not backend and backend.state is BackendState.INACTIVE


def test_after_an_interrupted_first_tune_calls_run_the_module(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    with pytest.raises(KeyboardInterrupt):
        ait.tune(wrapped, samples(), batch_sizes=[1, 4], strategy=one(InterruptingBackend()))
    assert wrapped.state is ModuleState.RECORDING and not wrapped.backends
    x = torch.randn(2, WIDTH)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)
    tune_frozen(wrapped)
    assert wrapped.state is ModuleState.TUNED


def test_routes_deactivated_by_a_run_serve_again_when_it_restores(unique_name: Name) -> None:
    """What tune does for the other modules when it stops half-way through several."""
    model, wrapped, backend = tuned(unique_name)
    previous = wrapped.start_recording()
    wrapped.deactivate()  # tuning another module
    wrapped.drop_routes()
    wrapped.restore(previous)
    assert_still_routed(model, wrapped, backend)


class Pipeline(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first: nn.Module = mlp()
        self.second: nn.Module = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


def test_a_re_tune_of_several_modules_stopped_half_way_keeps_every_previous_route(unique_name: Name) -> None:
    pipeline = Pipeline().eval()
    pipeline.first = ait.Module(pipeline.first, unique_name("first"))
    pipeline.second = ait.Module(pipeline.second, unique_name("second"), strategy=one(FrozenBackend()))
    ait.tune(pipeline, samples(), batch_sizes=[1, 4], strategy=one(FrozenBackend()))
    pipeline.second.strategy = one(InterruptingBackend())
    with pytest.raises(KeyboardInterrupt):
        ait.tune(pipeline, samples(), batch_sizes=[1, 4], strategy=one(FrozenBackend()))
    assert pipeline.first.state is ModuleState.TUNED and pipeline.second.state is ModuleState.TUNED


CTRL_C_WHILE_CHOOSING_A_STRATEGY = """
from aitune_core import hookimpl

AITUNE_PLUGIN_API = 1


@hookimpl
def aitune_choose_strategy(module, device):
    raise KeyboardInterrupt
"""


def test_ctrl_c_between_gathering_and_building_leaves_the_module_recording(
    unique_name: Name, aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any
) -> None:
    """Tuning asks plugins for a strategy after gathering; Ctrl-C there ends the run like anywhere else."""
    wrapped = ait.Module(mlp(), unique_name("model"))
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-fake-ctrl-c", CTRL_C_WHILE_CHOOSING_A_STRATEGY))
    with pytest.raises(KeyboardInterrupt):
        ait.tune(wrapped, samples(), batch_sizes=[1, 4])  # no strategy given: the plugin is asked for one
    assert wrapped.state is ModuleState.RECORDING and not wrapped.backends
    elsewhere = threading.Thread(target=lambda: wrapped(torch.randn(11, WIDTH)))
    ours = wrapped.recorded_calls
    with torch.no_grad():
        elsewhere.start()
        elsewhere.join()
        wrapped(torch.randn(3, WIDTH))
    (graph,) = wrapped.graph_specs
    assert graph.input_spec.tensor_data[0][1].max_shape[0] == 4, "another thread's call is never tuning data"
    assert wrapped.recorded_calls == ours, "and neither is this thread's outside a tuning run"
    (apart,) = wrapped._recordings.unsessioned.graph_specs
    assert apart.input_spec.tensor_data[0][1].max_shape[0] == 11, "the run's claim ended: both are recorded apart"
