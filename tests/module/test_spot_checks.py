"""Spot checks: a backend that goes wrong after validation is caught while serving, and dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from module_helpers import WIDTH, FrozenBackend, mlp, one, samples
from torch import nn

import aitune_core as ait
from aitune_core.config import Config, config
from aitune_core.log import capture

Name = Callable[[str], str]
FAILED = "spot check failed: the backend is dropped and the original module serves its calls"


class DriftingBackend(FrozenBackend):
    """Right for its first ``right_for`` calls after tuning, then 0.1 off on every output."""

    name = "test_drifting"
    right_for: int | None = None  # None while tuning: validation sees a correct backend

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        outputs = super()._infer(*args, **kwargs)
        return outputs + 0.1 if self.right_for is not None and self.calls > self.right_for else outputs


def tuned_drifting(unique_name: Name, right_for: int) -> tuple[nn.Module, ait.Module, DriftingBackend]:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    ait.tune(wrapped, samples(), batch_sizes=[1, 4], strategy=one(DriftingBackend()))
    backend = wrapped.backends["0"]
    assert isinstance(backend, DriftingBackend)
    backend.calls, backend.right_for = 0, right_for
    return model, wrapped, backend


POSITIONAL = pytest.param(lambda wrapped, x: wrapped(x), id="model(x)")
BY_NAME = pytest.param(lambda wrapped, x: wrapped(input=x), id="model(input=x)")


def served(wrapped: ait.Module, model: nn.Module, call: Callable[..., Any], calls: int) -> list[float]:
    """How far each of ``calls`` routed calls is from eager."""
    errors = []
    for _ in range(calls):
        x = torch.randn(3, WIDTH)
        with torch.no_grad():
            errors.append(float((call(wrapped, x) - model(x)).abs().max()))
    return errors


@pytest.mark.parametrize("call", [POSITIONAL, BY_NAME])
def test_a_backend_that_drifts_is_dropped_at_the_first_check_after_it_does(
    unique_name: Name, call: Callable[..., Any]
) -> None:
    config.spot_check_every = 1
    model, wrapped, backend = tuned_drifting(unique_name, right_for=3)
    with capture() as events:
        errors = served(wrapped, model, call, 6)
    assert errors[:3] == [0.0] * 3
    assert errors[3] == pytest.approx(0.1), "the checked call itself gets the backend's answer"
    assert errors[4:] == [0.0, 0.0] and backend.calls == 4, "then the original module serves"
    (failed,) = [event for event in events if event["event"] == FAILED]
    assert failed["module"] == wrapped.name and failed["graph"] == "0" and failed["backend"] == backend.describe()
    assert failed["error"].startswith("`output` differs from eager: max abs error 0.1")
    wrapped.deactivate()  # as a tuning run of another module does
    wrapped.activate()
    assert served(wrapped, model, call, 2) == [0.0, 0.0] and backend.calls == 4, "dropped for good"


@pytest.mark.parametrize("call", [POSITIONAL, BY_NAME])
def test_one_routed_call_in_n_is_checked(unique_name: Name, call: Callable[..., Any]) -> None:
    config.spot_check_every = 3
    model, wrapped, backend = tuned_drifting(unique_name, right_for=4)
    errors = served(wrapped, model, call, 8)
    assert errors[:4] == [0.0] * 4
    assert errors[4:6] == [pytest.approx(0.1)] * 2, "calls 5 and 6 are wrong; call 6 is the second one checked"
    assert errors[6:] == [0.0, 0.0] and backend.calls == 6


def test_spot_checks_are_off_by_default_and_a_drifted_backend_keeps_serving(unique_name: Name) -> None:
    assert not Config().spot_check_every
    model, wrapped, backend = tuned_drifting(unique_name, right_for=0)
    assert served(wrapped, model, POSITIONAL.values[0], 3) == [pytest.approx(0.1)] * 3
    assert backend.calls == 3


def test_a_correct_backend_passes_every_check(unique_name: Name) -> None:
    config.spot_check_every = 1
    model, wrapped, backend = tuned_drifting(unique_name, right_for=1000)
    with capture() as events:
        assert served(wrapped, model, POSITIONAL.values[0], 5) == [0.0] * 5
    assert backend.calls == 5 and not [event for event in events if event["log_level"] == "warning"]


def test_spot_check_every_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITUNE_SPOT_CHECK_EVERY", "100")
    assert Config().spot_check_every == 100
    monkeypatch.setenv("AITUNE_SPOT_CHECK_EVERY", "often")
    with pytest.raises(ValueError, match="AITUNE_SPOT_CHECK_EVERY must be a whole number of calls"):
        Config()
    with pytest.raises(ValueError, match=r"config\.spot_check_every must be a whole number of at least 0"):
        config.spot_check_every = -1
