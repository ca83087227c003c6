"""An optimizer step is seen by the very next call, not up to ``CHECK_EVERY - 1`` calls later."""

from __future__ import annotations

from collections.abc import Callable

import torch
from refit_backends import CopyBackend
from refit_helpers import WAIT_S, WIDTH, mlp, run, tune_with
from torch import nn

import aitune_core as ait

Name = Callable[[str], str]


def step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """One optimizer step, the module left in eval mode (as a policy is updated between its rollouts)."""
    optimizer.zero_grad()
    model(torch.randn(4, WIDTH)).square().sum().backward()
    optimizer.step()


def test_the_call_after_an_optimizer_step_runs_the_new_weights(unique_name: Name) -> None:
    ait.config.on_weight_change = "eager"
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, CopyBackend())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    x = torch.randn(2, WIDTH)
    for _ in range(3):
        run(wrapped, x)  # routed: the periodic check is not due for a while
        step(model, optimizer)
        calls = backend.calls
        torch.testing.assert_close(run(wrapped, x), run(model, x), rtol=0, atol=0)
        assert backend.calls == calls, "the backend built for the old weights answered after the step"


def test_an_optimizer_of_other_parameters_leaves_the_routes_alone(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, CopyBackend())
    x = torch.randn(2, WIDTH)
    run(wrapped, x)
    other = nn.Linear(WIDTH, 1)
    step(other, torch.optim.SGD(other.parameters(), lr=0.5))
    assert not wrapped.__dict__["_watch"].alarm, "a step of another model alarmed this one"
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert backend.calls == 2


def test_after_an_optimizer_step_the_routes_are_refitted_in_the_background(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    backend = tune_with(wrapped, CopyBackend())
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    x = torch.randn(2, WIDTH)
    step(model, optimizer)
    torch.testing.assert_close(run(wrapped, x), run(model, x), rtol=0, atol=0)
    report = ait.wait_for_refit(wrapped, timeout=WAIT_S)
    assert report is not None and [row.outcome for row in report.routes] == ["refitted"]
    calls = backend.calls
    torch.testing.assert_close(run(wrapped, x), run(model, x))
    assert backend.calls == calls + 1
