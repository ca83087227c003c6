"""Tuning with this backend, end to end through ``aitune_core.tune``."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.models import Positive, TinyMLP
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_onnx import ONNXRuntimeBackend

pytestmark = pytest.mark.slow

_names = itertools.count()


def test_tune_builds_validates_and_routes() -> None:
    model = TinyMLP().eval()
    wrapped = ait.Module(model, f"onnx-tune-{next(_names)}")
    backends = [ONNXRuntimeBackend(), ait.TorchEagerBackend()]
    strategy = ait.MaxThroughputStrategy(backends=backends, profile=SHORT_PROFILE)
    report = ait.tune(wrapped, [torch.randn(8) for _ in range(8)], batch_sizes=[2, 4, 8], strategy=strategy)
    (graph,) = report.graphs
    statuses = {candidate.backend: candidate.status for candidate in graph.candidates}
    assert statuses["ONNXRuntimeBackend()"] in ("selected", "passed"), graph.candidates
    assert graph.selected is not None
    for batch in (2, 3, 8):
        x = torch.randn(batch, 8)
        with torch.no_grad():
            torch.testing.assert_close(wrapped(x), model(x), rtol=1e-4, atol=1e-5)


def test_nonzero_validates_through_a_strategy() -> None:
    """Validation compares a data-dependent output at every recorded sample and extreme."""
    model = Positive().eval()
    wrapped = ait.Module(model, f"onnx-tune-{next(_names)}")
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    report = ait.tune(wrapped, [torch.randn(5) for _ in range(8)], batch_sizes=[2, 4, 8], strategy=strategy)
    assert report.graphs[0].selected.backend == "ONNXRuntimeBackend()"  # type: ignore[union-attr]
    x = torch.randn(6, 5)
    indices, doubled = wrapped(x)
    torch.testing.assert_close(indices, torch.nonzero(x > 0))
    torch.testing.assert_close(doubled, x * 2)


def test_tune_with_the_plugins_defaults(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    """No backend named: the installed plugin's default candidate is tried next to eager."""
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-onnx", entry_points={"onnx": "aitune_onnx.plugin"}))
    model = TinyMLP().eval()
    wrapped = ait.Module(model, f"onnx-tune-{next(_names)}", strategy=ait.FirstWinsStrategy(profile=SHORT_PROFILE))
    report = ait.tune(wrapped, [torch.randn(8) for _ in range(8)], batch_sizes=[2, 4])
    names = [candidate.backend for candidate in report.graphs[0].candidates]
    assert names[0] == "ONNXRuntimeBackend()", report.graphs[0].candidates
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x), rtol=1e-4, atol=1e-5)
