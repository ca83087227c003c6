"""A candidate that changes the user's module fails the same way wherever it runs.

In a child process it cannot change the parent's module, but it changes the child's
copy, against which it would then validate; the guard runs in the child too. A winner
restored in the parent runs guarded there as well.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import torch
from executor_backends import FAST_PROFILE, SlowableMLP
from module_editing_backends import ScalesOnActivate, ScalesOnBuild

import aitune_core as ait
from aitune_core.backends import TorchEagerBackend
from aitune_core.strategies import FirstWinsStrategy, MaxThroughputStrategy


def samples(count: int = 4) -> list[torch.Tensor]:
    return [torch.randn(16) for _ in range(count)]


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def assert_unchanged(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved[name]), f"{name} changed"


def test_a_child_reports_the_change_as_in_process_does(unique_name: Callable[..., str]) -> None:
    reasons = {}
    for executor in ("inprocess", "subprocess"):
        model = SlowableMLP(0.005).eval()
        saved = weights(model)
        module = ait.Module(model, unique_name())
        strategy = MaxThroughputStrategy([ScalesOnBuild(), TorchEagerBackend()], profile=FAST_PROFILE)
        report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor=executor)
        rows = {row.backend: row for row in report.graphs[0].candidates}
        row = rows["ScalesOnBuild()"]
        assert (row.status, row.stage) == ("failed", "build"), row
        reasons[executor] = row.reason.replace(module.name, "<module>")
        assert rows["TorchEagerBackend()"].status == "selected"
        assert_unchanged(model, saved)
        if executor == "subprocess":
            assert row.worker.endswith(f"@{socket.gethostname()}")
        del module
    assert reasons["subprocess"] == reasons["inprocess"]
    assert reasons["inprocess"].startswith("changed the user's module during build: <module>.up.weight was modified")


def test_a_winner_that_changes_the_module_when_restored_here_fails_and_is_undone(
    unique_name: Callable[..., str],
) -> None:
    model = SlowableMLP(0.005).eval()
    saved = weights(model)
    module = ait.Module(model, unique_name())
    strategy = FirstWinsStrategy([ScalesOnActivate()], profile=FAST_PROFILE)
    report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor="subprocess")
    rows = report.graphs[0].candidates
    assert (rows[0].status, rows[0].stage) == ("failed", "activate"), rows[0]
    assert f"{module.name}.up.weight was modified in place" in rows[0].reason
    assert rows[-1].status == "fallback"
    assert isinstance(module.backends["0"], TorchEagerBackend)
    assert_unchanged(model, saved)
