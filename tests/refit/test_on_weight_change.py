"""``config.on_weight_change``: new weights refitted in the background, served eagerly, or refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from refit_backends import CopyBackend, MeddlingRefitBackend, PausingRefitBackend
from refit_helpers import WAIT_S, WIDTH, UserState, cnn, mlp, new_weights, run, samples, tune_with
from torch import nn

import aitune_core as ait
from aitune_core.config import Config
from aitune_core.log import capture

Name = Callable[[str], str]
BYPASSED = "tuned backends bypassed, running the original module"


def test_new_weights_are_refitted_in_the_background_while_the_original_module_serves(unique_name: Name) -> None:
    assert ait.config.on_weight_change == "refit", "the default"
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, CopyBackend())
    model.load_state_dict(new_weights(model))
    x = torch.randn(3, WIDTH)
    with capture() as events:
        torch.testing.assert_close(run(wrapped, x), run(model, x), rtol=0, atol=0)  # the original module's answer
        report = ait.wait_for_refit(wrapped, timeout=WAIT_S)
    assert report is not None and report.background
    assert [(row.outcome, row.module) for row in report.routes] == [("refitted", wrapped.name)]
    (warning,) = [event for event in events if event["event"] == BYPASSED]
    assert "refitted for them in the background" in warning["hint"]
    assert [e["event"] for e in events if e["event"].startswith("refit ")] == ["refit started", "refit finished"]
    calls = backend.calls
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert backend.calls == calls + 1 and backend.refits == 1


def test_weights_changed_during_a_background_refit_discard_it_and_it_starts_again(
    unique_name: Name, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(PausingRefitBackend, "pauses", 1)
    PausingRefitBackend.entered.clear()
    PausingRefitBackend.proceed.clear()
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, PausingRefitBackend())
    model.load_state_dict(new_weights(model, seed=1))
    x = torch.randn(2, WIDTH)
    run(wrapped, x)  # sees the new weights and starts the refit, which stops half-way
    assert PausingRefitBackend.entered.wait(30)
    latest = new_weights(model, seed=2)
    model.load_state_dict(latest)  # the user's write during the refit: kept, never put back
    torch.testing.assert_close(run(wrapped, x), run(model, x), rtol=0, atol=0)
    PausingRefitBackend.proceed.set()
    report = ait.wait_for_refit(wrapped, timeout=WAIT_S)
    assert report is not None and report.discarded == 1
    assert [row.outcome for row in report.routes] == ["refitted"]
    assert all(torch.equal(model.state_dict()[key], value) for key, value in latest.items())
    calls = backend.calls
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert backend.calls == calls + 1 and backend.refits == 2


def test_a_background_refit_leaves_the_users_model_as_it_was(unique_name: Name) -> None:
    model = cnn()
    wrapped = ait.Module(model, unique_name("model"))
    tune_with(wrapped, CopyBackend(), samples(shape=(3, 6, 6)))
    model.load_state_dict(new_weights(model))
    before = UserState.of(model)
    run(wrapped, torch.randn(2, 3, 6, 6))
    report = ait.wait_for_refit(wrapped, timeout=WAIT_S)
    assert report is not None and report.ok
    assert before.differences(UserState.of(model)) == []


def test_a_background_refit_that_writes_the_users_weights_is_undone_and_the_candidate_rebuilt(
    unique_name: Name,
) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    tune_with(wrapped, MeddlingRefitBackend())
    model.load_state_dict(new_weights(model))
    before = UserState.of(model)
    x = torch.randn(2, WIDTH)
    run(wrapped, x)
    report = ait.wait_for_refit(wrapped, timeout=WAIT_S)
    assert report is not None and report.discarded == 0
    (row,) = report.routes
    assert row.outcome == "rebuilt" and "changed the user's module during refit" in row.reason
    assert before.differences(UserState.of(model)) == []
    torch.testing.assert_close(run(wrapped, x), run(model, x))


def test_eager_serves_new_weights_until_refit_is_called(unique_name: Name) -> None:
    ait.config.on_weight_change = "eager"
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, CopyBackend())
    model.load_state_dict(new_weights(model))
    x = torch.randn(2, WIDTH)
    with capture() as events:
        for _ in range(3):
            torch.testing.assert_close(run(wrapped, x), run(model, x), rtol=0, atol=0)
    assert ait.wait_for_refit(wrapped, timeout=WAIT_S) is None
    assert (backend.calls, backend.refits) == (0, 0)
    (warning,) = [event for event in events if event["event"] == BYPASSED]
    assert "call aitune_core.refit(model)" in warning["hint"]
    ait.refit(wrapped)
    calls = backend.calls  # validation's calls
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert backend.calls == calls + 1


def test_raise_refuses_calls_with_new_weights_and_names_the_fix(unique_name: Name) -> None:
    ait.config.on_weight_change = "raise"
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, CopyBackend())
    model.load_state_dict(new_weights(model))
    x = torch.randn(2, WIDTH)
    fix = r"aitune_core\.refit\(model\).*on_weight_change = 'refit'"
    for _ in range(2):
        with pytest.raises(ait.StaleWeightsError, match=fix):
            run(wrapped, x)
    assert backend.calls == 0
    assert ait.refit(wrapped).ok
    calls = backend.calls
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert backend.calls == calls + 1


def test_the_setting_and_its_environment_variable_take_only_the_three_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"on_weight_change must be one of 'refit', 'eager', 'raise', got 'later'"):
        ait.config.on_weight_change = "later"
    monkeypatch.setenv("AITUNE_ON_WEIGHT_CHANGE", " Raise ")
    assert Config().on_weight_change == "raise"
    monkeypatch.setenv("AITUNE_ON_WEIGHT_CHANGE", "sometimes")
    with pytest.raises(ValueError, match="on_weight_change must be one of"):
        Config()


class Counting(nn.Module):
    """Counts its calls in a buffer: every eager call, validation's too, changes its weights."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, 4)
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.add_(1)
        return self.linear(x)


def test_a_module_that_changes_its_own_weights_stops_the_refit_instead_of_looping(unique_name: Name) -> None:
    model = Counting().eval()
    wrapped = ait.Module(model, unique_name("model"))
    tune_with(wrapped, CopyBackend())
    model.load_state_dict({**new_weights(model), "seen": model.seen.clone()})
    with capture() as events:
        assert ait.wait_for_refit(wrapped, timeout=WAIT_S) is None  # starts the refit that is due, no call beside it
    (stopped,) = [event for event in events if event["event"] == "background refit stopped"]
    assert "changed during each of 8 refits in a row" in stopped["reason"]
    assert sum(event["event"] == "refit discarded" for event in events) == 8
    x = torch.randn(2, WIDTH)
    with capture() as events:
        torch.testing.assert_close(run(wrapped, x), run(model, x), rtol=0, atol=0)
        assert ait.wait_for_refit(wrapped, timeout=WAIT_S) is None
    assert not [event for event in events if event["event"] == "refit started"], "no new attempt until a hook fires"
    with pytest.raises(ait.RefitError, match="changed during each of 3 refits in a row"):
        ait.refit(wrapped)
    ait.config.on_weight_change = "eager"  # no background refit beside the call below, which writes `seen` too
    torch.testing.assert_close(run(wrapped, x), run(model, x), rtol=0, atol=0)
