"""``aitune_core.refit(model)``: each route takes the new weights (refitted, rebuilt or left to eager), validated."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from refit_backends import CopyBackend, MeddlingRefitBackend, NoRefitBackend, WrongRefitBackend
from refit_helpers import WIDTH, UserState, cnn, mlp, new_weights, run, samples, tune_with

import aitune_core as ait
from aitune_core.log import capture

Name = Callable[[str], str]


@pytest.fixture(autouse=True)
def _eager_on_change() -> Iterator[None]:
    """No background refit: these tests refit when they say so."""
    ait.config.on_weight_change = "eager"
    yield


def test_a_backend_that_refits_serves_the_new_weights(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, CopyBackend())
    model.load_state_dict(new_weights(model))
    x = torch.randn(3, WIDTH)
    report = ait.refit(wrapped)
    (row,) = report.routes
    assert (row.outcome, row.reason) == ("refitted", "")
    assert row.validation.startswith("passed") and row.module == wrapped.name
    assert wrapped.routes[next(iter(wrapped.routes))].backend is backend, "the backend itself took the weights"
    calls = backend.calls
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert backend.calls == calls + 1, "the refitted backend answers, not the original module"
    assert "refitted" in str(report) and "Refit now" in str(report)


def test_a_refit_that_gives_wrong_answers_is_refused_and_the_candidate_rebuilt(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    old = tune_with(wrapped, WrongRefitBackend())
    model.load_state_dict(new_weights(model))
    report = ait.refit(wrapped)
    (row,) = report.routes
    assert row.outcome == "rebuilt"
    assert row.reason.startswith("it failed validation after its refit: ")
    new = wrapped.routes[next(iter(wrapped.routes))].backend
    assert isinstance(new, WrongRefitBackend) and new is not old
    assert old.state is ait.BackendState.INACTIVE, "the refused backend is released"
    x, calls = torch.randn(2, WIDTH), new.calls
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert new.calls == calls + 1


def test_when_the_rebuild_fails_too_the_original_module_serves_and_the_report_says_why(
    unique_name: Name, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    old = tune_with(wrapped, WrongRefitBackend())
    model.load_state_dict(new_weights(model))
    monkeypatch.setattr(CopyBackend, "fail_builds", True)
    with capture() as events:
        report = ait.refit(wrapped)
    (row,) = report.routes
    assert row.outcome == "eager" and not report.ok
    assert "it failed validation after its refit" in row.reason
    assert "then its rebuild failed (build): RuntimeError: this build fails on purpose" in row.reason
    assert any(e["event"] == "range left to the original module" for e in events)
    route = wrapped.routes[next(iter(wrapped.routes))]
    assert isinstance(route.backend, ait.TorchEagerBackend) and old.state is ait.BackendState.INACTIVE
    x = torch.randn(2, WIDTH)
    torch.testing.assert_close(run(wrapped, x), run(model, x), rtol=0, atol=0)


def test_a_backend_that_cannot_refit_is_rebuilt(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    old = tune_with(wrapped, NoRefitBackend())
    model.load_state_dict(new_weights(model))
    report = ait.refit(wrapped)
    (row,) = report.routes
    assert row.outcome == "rebuilt" and "can_refit() is False" in row.reason
    new = wrapped.routes[next(iter(wrapped.routes))].backend
    assert new is not old and old.refits == 0
    x, calls = torch.randn(4, WIDTH), new.calls
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert new.calls == calls + 1


def test_a_refit_leaves_the_users_model_as_it_was(unique_name: Name) -> None:
    model = cnn()
    wrapped = ait.Module(model, unique_name("model"))
    tune_with(wrapped, CopyBackend(), samples(shape=(3, 6, 6)))
    model.load_state_dict(new_weights(model))
    model[0].weight.requires_grad_(False)  # a frozen layer, as fine-tuning leaves some
    before = UserState.of(model)
    ait.refit(wrapped)
    assert before.differences(UserState.of(model)) == []
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)


def test_a_refit_that_writes_the_users_weights_is_undone_and_the_candidate_rebuilt(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    tune_with(wrapped, MeddlingRefitBackend())
    model.load_state_dict(new_weights(model))
    before = UserState.of(model)
    report = ait.refit(wrapped)
    (row,) = report.routes
    assert row.outcome == "rebuilt" and "changed the user's module during refit" in row.reason
    assert [d for d in before.differences(UserState.of(model)) if "values" in d] == []
    x = torch.randn(2, WIDTH)
    torch.testing.assert_close(run(wrapped, x), run(model, x))


def test_calls_are_routed_again_after_a_refit(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, CopyBackend())
    model.load_state_dict(new_weights(model))
    x = torch.randn(2, WIDTH)
    run(wrapped, x)
    assert backend.calls == 0, "stale: the original module answers until the refit"
    ait.refit(wrapped)
    calls = backend.calls
    for _ in range(3):
        torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert backend.calls == calls + 3


def test_refit_refuses_a_model_with_nothing_tuned_and_a_module_in_training_mode(unique_name: Name) -> None:
    with pytest.raises(ait.RefitError, match=r"call aitune_core\.tune first"):
        ait.refit(mlp())
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, CopyBackend())
    model.train()
    with pytest.raises(ait.RefitError, match=r"training mode.*\.eval\(\)"):
        ait.refit(wrapped)
    assert backend.refits == 0
    model.eval()
    x, calls = torch.randn(2, WIDTH), backend.calls
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert backend.calls == calls + 1, "the refused refit left the routes serving"
