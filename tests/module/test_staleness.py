"""A tuned module that changes after tuning: calls go to the original module, never to stale backends.

These tests look at what the calls do, with no refit behind them (``config.on_weight_change
= "eager"``); tests/refit has what the background refit adds.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from module_helpers import WIDTH, FrozenBackend, mlp, one, samples, tune_frozen
from torch import nn

import aitune_core as ait
from aitune_core.log import capture
from aitune_core.module import staleness

Name = Callable[[str], str]
BYPASSED = "tuned backends bypassed, running the original module"


@pytest.fixture(autouse=True)
def _no_background_refit() -> Iterator[None]:
    ait.config.on_weight_change = "eager"
    yield


def bypass_warnings(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == BYPASSED]


def tuned(unique_name: Name, model: nn.Module | None = None) -> tuple[nn.Module, ait.Module, FrozenBackend]:
    model = model if model is not None else mlp()
    wrapped = ait.Module(model, unique_name("model"))
    tune_frozen(wrapped)
    backend = wrapped.backends["0"]
    assert isinstance(backend, FrozenBackend)
    backend.calls = 0  # count from here: tuning calls it too
    return model, wrapped, backend


def other_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: torch.rand_like(v) + 0.5 if v.is_floating_point() else v for k, v in model.state_dict().items()}


class Holder(nn.Module):
    def __init__(self, child: nn.Module) -> None:
        super().__init__()
        self.child = child

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child(x)


# ---------------------------------------------------------------------- weights


LOADS: dict[str, Callable[[ait.Module, nn.Module], None]] = {
    "wrapper": lambda wrapped, model: wrapped.load_state_dict(other_weights(model)),
    "wrapped module": lambda wrapped, model: model.load_state_dict(other_weights(model)),
    "parent": lambda wrapped, model: Holder(wrapped).load_state_dict(
        {f"child.{k}": v for k, v in other_weights(model).items()}
    ),
    "submodule": lambda wrapped, model: model[0].load_state_dict(other_weights(model[0])),
    "assign": lambda wrapped, model: model.load_state_dict(other_weights(model), assign=True),
}


@pytest.mark.parametrize("how", list(LOADS))
def test_after_load_state_dict_calls_run_the_new_weights_with_one_warning(unique_name: Name, how: str) -> None:
    model, wrapped, backend = tuned(unique_name)
    x = torch.randn(3, WIDTH)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x))
        routed = backend.calls
        LOADS[how](wrapped, model)
        with capture() as events:
            for _ in range(3):
                torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)
    assert backend.calls == routed, "the stale backend answered"
    (warning,) = bypass_warnings(events)
    assert "weights changed" in warning["change"]
    assert "re-run aitune_core.tune, or load a checkpoint" in warning["hint"]


def test_in_place_writes_are_seen_within_check_every_calls(unique_name: Name) -> None:
    model, wrapped, backend = tuned(unique_name)
    x = torch.randn(2, WIDTH)
    with torch.no_grad():
        wrapped(x)
        model[4].weight.mul_(3)  # no hook fires: only the periodic check sees the version counter move
        served = [torch.equal(wrapped(x), model(x)) for _ in range(staleness.CHECK_EVERY)]
        assert served[-1], "still stale after CHECK_EVERY calls"
        first = served.index(True)
        assert all(served[first:])
        calls = backend.calls
        wrapped(x)
    assert backend.calls == calls


def test_an_optimizer_step_is_seen(unique_name: Name) -> None:
    model, wrapped, _backend = tuned(unique_name)
    x = torch.randn(2, WIDTH)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(x).sum().backward()
    optimizer.step()
    with torch.no_grad(), capture() as events:
        outputs = [wrapped(x) for _ in range(staleness.CHECK_EVERY)]
        torch.testing.assert_close(outputs[-1], model(x), rtol=0, atol=0)
    assert "in place" in bypass_warnings(events)[0]["change"]


def test_moving_through_the_wrapper_is_seen_on_the_next_call(unique_name: Name) -> None:
    model, wrapped, backend = tuned(unique_name)
    x = torch.randn(2, WIDTH)
    wrapped.to(torch.float64).to(torch.float32)  # same values, new storage: the backend's copy is not them
    with torch.no_grad(), capture() as events:
        torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)
    assert backend.calls == 0
    assert "the module's weights" in bypass_warnings(events)[0]["change"]


def test_a_replaced_submodule_is_seen(unique_name: Name) -> None:
    model, wrapped, backend = tuned(unique_name)
    x = torch.randn(2, WIDTH)
    setattr(wrapped, "4", nn.Linear(16, 4))  # through the wrapper, into the dict it shares with the model
    with torch.no_grad(), capture() as events:
        torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)
    assert backend.calls == 0
    assert "replaced: 4" in bypass_warnings(events)[0]["change"]


def test_an_unchanged_module_is_always_routed_without_warnings(unique_name: Name) -> None:
    _model, wrapped, backend = tuned(unique_name)
    x = torch.randn(4, WIDTH)
    with torch.no_grad(), capture() as events:
        for _ in range(3 * staleness.CHECK_EVERY):
            wrapped(x)
        wrapped.eval()  # already in eval mode: the hook fires, the check finds nothing
        wrapped.to(torch.float32)
        wrapped(x)
    assert backend.calls == 3 * staleness.CHECK_EVERY + 1
    assert not bypass_warnings(events)


def test_backends_running_the_live_module_keep_serving_new_weights(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("eager"))
    ait.tune(wrapped, samples(), batch_sizes=[1, 4], strategy=one(ait.TorchEagerBackend()))
    assert wrapped.routes[next(iter(wrapped.routes))].follows_weights
    model.load_state_dict(other_weights(model))
    x = torch.randn(2, WIDTH)
    with torch.no_grad(), capture() as events:
        torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)
    assert not bypass_warnings(events)


def test_tuning_again_routes_to_backends_built_for_the_new_weights(unique_name: Name) -> None:
    model, wrapped, _ = tuned(unique_name)
    model.load_state_dict(other_weights(model))
    tune_frozen(wrapped)
    backend = wrapped.backends["0"]
    assert isinstance(backend, FrozenBackend)
    backend.calls = 0
    x = torch.randn(2, WIDTH)
    with torch.no_grad(), capture() as events:
        torch.testing.assert_close(wrapped(x), model(x))
    assert backend.calls == 1 and not bypass_warnings(events)


# ---------------------------------------------------------------------- modes


def dropout_model() -> nn.Module:
    return nn.Sequential(nn.Linear(WIDTH, 64), nn.Dropout(0.5), nn.Linear(64, 4)).eval()


def test_training_mode_runs_dropout_and_eval_routes_again(unique_name: Name) -> None:
    model, wrapped, backend = tuned(unique_name, dropout_model())
    x = torch.randn(4, WIDTH)
    wrapped.train()
    with torch.no_grad(), capture() as events:
        torch.manual_seed(1)
        trained = [wrapped(x) for _ in range(2)]
        torch.manual_seed(1)
        expected = [model(x) for _ in range(2)]
    for got, want in zip(trained, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert backend.calls == 0
    (warning,) = bypass_warnings(events)
    assert "training mode" in warning["change"] and ".eval()" in warning["hint"]
    wrapped.eval()
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x))
    assert backend.calls == 1


def test_eval_on_the_wrapped_module_itself_routes_again(unique_name: Name) -> None:
    model, wrapped, backend = tuned(unique_name, dropout_model())
    x = torch.randn(4, WIDTH)
    model.train()  # the wrapped module directly, no hook: its flag is read on every call
    with torch.no_grad():
        wrapped(x)
        assert backend.calls == 0
        model.eval()
        wrapped(x)
    assert backend.calls == 1


def test_a_submodule_in_training_mode_is_seen(unique_name: Name) -> None:
    model, wrapped, backend = tuned(unique_name, dropout_model())
    x = torch.randn(4, WIDTH)
    model[1].train()
    with torch.no_grad(), capture() as events:
        for _ in range(staleness.CHECK_EVERY):
            wrapped(x)
        routed = backend.calls
        wrapped(x)
        assert backend.calls == routed < staleness.CHECK_EVERY
        model[1].eval()
        wrapped(x)
    assert backend.calls == routed + 1
    assert "1" in bypass_warnings(events)[0]["change"]


def test_calls_in_training_mode_that_update_batch_norm_keep_eager_after_eval(unique_name: Name) -> None:
    model, wrapped, backend = tuned(unique_name)
    x = torch.randn(4, WIDTH)
    wrapped.train()
    wrapped(x)  # BatchNorm's running statistics move: the backend's copy of them is stale now
    wrapped.eval()
    with torch.no_grad(), capture() as events:
        torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)
    assert backend.calls == 0
    assert "weights changed" in bypass_warnings(events)[0]["change"]


# ---------------------------------------------------------------------- gradients


def test_inputs_requiring_grad_get_gradients_and_no_grad_routes_again(unique_name: Name) -> None:
    _model, wrapped, backend = tuned(unique_name)
    x = torch.randn(3, WIDTH, requires_grad=True)
    with capture() as events:
        out = wrapped(x)
        wrapped(x)
    assert out.requires_grad and backend.calls == 0
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    (warning,) = bypass_warnings(events)
    assert "requires grad" in warning["change"] and "no_grad" in warning["hint"]
    with torch.no_grad():
        wrapped(x)
    wrapped(x.detach())
    assert backend.calls == 2


# ---------------------------------------------------------------------- the hooks left on the module


def test_the_wrapped_module_still_pickles_and_copies(unique_name: Name) -> None:
    model, wrapped, backend = tuned(unique_name)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=False)
    restored.load_state_dict(other_weights(model))
    clone = pickle.loads(pickle.dumps(model))
    copied = copy.deepcopy(model)
    clone.load_state_dict(other_weights(model))
    copied.load_state_dict(other_weights(model))
    x = torch.randn(2, WIDTH)
    with torch.no_grad(), capture() as events:
        wrapped(x)
    assert backend.calls == 1 and not bypass_warnings(events)
