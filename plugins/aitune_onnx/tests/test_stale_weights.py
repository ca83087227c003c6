"""An ONNX Runtime winner carries its own weights: after the module changes, calls go to the module."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.engine import Route, capture
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_onnx import ONNXRuntimeBackend

pytestmark = pytest.mark.slow

BYPASSED = "tuned backends bypassed, running the original module"
_names = itertools.count()


class Counted:
    """Counts the calls that reach the ONNX Runtime session."""

    def __init__(self, route: Route) -> None:
        self.call = route.call
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.call(*args, **kwargs)


@pytest.fixture
def tuned(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[torch.nn.Module, ait.Module, Counted]]:
    # What these tests check is the eager stand-in itself, not a background refit racing it.
    monkeypatch.setattr(ait.config, "on_weight_change", "eager")
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(32, 4)
    ).eval()
    wrapped = ait.Module(model, f"onnx-stale-{next(_names)}")
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    ait.tune(wrapped, [torch.randn(8) for _ in range(8)], batch_sizes=[2, 4], strategy=strategy)
    (route,) = wrapped.routes.values()
    assert isinstance(route.backend, ONNXRuntimeBackend)
    counted = Counted(route)
    route.call = counted
    yield model, wrapped, counted


def test_after_load_state_dict_the_new_weights_answer(tuned: tuple[torch.nn.Module, ait.Module, Counted]) -> None:
    model, wrapped, session = tuned
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x), rtol=1e-4, atol=1e-5)
        assert session.calls == 1
        model.load_state_dict({k: v * 2 if v.is_floating_point() else v for k, v in model.state_dict().items()})
        with capture() as events:
            for _ in range(2):
                torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)
    assert session.calls == 1
    (warning,) = [e for e in events if e["event"] == BYPASSED]
    assert "re-run aitune_core.tune, or load a checkpoint" in warning["hint"]


def test_a_training_mode_call_moves_batch_norm_so_eager_keeps_answering(
    tuned: tuple[torch.nn.Module, ait.Module, Counted],
) -> None:
    model, wrapped, session = tuned
    x = torch.randn(4, 8)
    reference = copy.deepcopy(model).train()
    wrapped.train()
    with torch.no_grad():
        torch.manual_seed(3)
        trained = wrapped(x)
        torch.manual_seed(3)
        torch.testing.assert_close(trained, reference(x), rtol=0, atol=0)  # dropout and batch statistics
    wrapped.eval()  # BatchNorm's running statistics moved: the session's copy of them is stale
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)
    assert session.calls == 0


def test_dropout_only_model_routes_again_after_eval() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 4)).eval()
    wrapped = ait.Module(model, f"onnx-stale-{next(_names)}")
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    ait.tune(wrapped, [torch.randn(8) for _ in range(8)], batch_sizes=[2, 4], strategy=strategy)
    (route,) = wrapped.routes.values()
    session = Counted(route)
    route.call = session
    x = torch.randn(4, 8)
    wrapped.train()
    with torch.no_grad():
        torch.manual_seed(3)
        trained = wrapped(x)
        torch.manual_seed(3)
        torch.testing.assert_close(trained, model(x), rtol=0, atol=0)
        assert session.calls == 0
        wrapped.eval()
        torch.testing.assert_close(wrapped(x), model(x), rtol=1e-4, atol=1e-5)
    assert session.calls == 1


def test_inputs_requiring_grad_get_gradients(tuned: tuple[torch.nn.Module, ait.Module, Counted]) -> None:
    _model, wrapped, session = tuned
    x = torch.randn(3, 8, requires_grad=True)
    out = wrapped(x)
    assert out.requires_grad and session.calls == 0
    out.sum().backward()
    assert x.grad is not None
    with torch.no_grad():
        wrapped(x)
    assert session.calls == 1
