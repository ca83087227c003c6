"""Tuning a model with these backends, end to end through ``aitune_core.tune``."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.models import TinyMLP
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_inductor import TorchInductorAotBackend

pytestmark = pytest.mark.slow

_names = itertools.count()
ENTRY_POINT = "aitune_inductor.plugin"


def _tuned(strategy: ait.TuneStrategy) -> tuple[torch.nn.Module, ait.Module, Any]:
    model = TinyMLP().eval()
    wrapped = ait.Module(model, f"inductor-tune-{next(_names)}")
    dataset = [torch.randn(8) for _ in range(8)]
    report = ait.tune(wrapped, dataset, batch_sizes=[2, 4, 8], strategy=strategy)
    return model, wrapped, report


def test_default_candidates_are_tuned_and_routed(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    """No backends named: the strategy takes the plugin's candidates (JIT, AOT) and eager."""
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-inductor", entry_points={"inductor": ENTRY_POINT}))
    strategy = ait.MaxThroughputStrategy(profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)  # this checks build, validate and route, not speed
    model, wrapped, report = _tuned(strategy)
    (graph,) = report.graphs
    tried = [candidate.backend for candidate in graph.candidates]
    assert tried == ["TorchInductorJitBackend()", "TorchInductorAotBackend()", "TorchEagerBackend()"]
    assert all(candidate.status in ("selected", "passed") for candidate in graph.candidates), graph.candidates
    assert graph.selected is not None and graph.selected.status == "selected"
    for batch in (2, 3, 8):
        x = torch.randn(batch, 8)
        with torch.no_grad():
            torch.testing.assert_close(wrapped(x), model(x), rtol=1e-4, atol=1e-5)


def test_batch_above_the_tuned_max_falls_back_to_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """An AOT package built for batch <= 8 would run batch 2000; routing keeps it out."""
    strategy = ait.OneBackendStrategy(TorchInductorAotBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    model, wrapped, report = _tuned(strategy)
    assert report.graphs[0].selected.backend == "TorchInductorAotBackend()"
    (route,) = wrapped._routes.values()
    assert isinstance(route.backend, TorchInductorAotBackend)
    calls = 0
    real_call = route.call  # what a routed call runs: the package's own callable

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real_call(*args, **kwargs)

    monkeypatch.setattr(route, "call", counting)
    x = torch.randn(2000, 8)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x))
    assert calls == 0, "a batch above the tuned max must not reach the package"
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x[:5]), model(x[:5]))
    assert calls == 1
