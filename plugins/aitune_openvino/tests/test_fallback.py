"""A graph torch.export cannot take is converted by tracing, and the row says so; or fails, saying why."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from openvino_helpers import served_by, tune_alone

import aitune_core as ait
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_openvino import OpenVINOBackend

pytestmark = pytest.mark.slow


class ScalesWithNumpy(torch.nn.Module):
    """Reads its input through numpy for a scale: export's fake tensors have no data, a trace has."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = float(np.sqrt(x.detach().numpy().shape[-1]))
        return self.linear(x) / scale


def dataset() -> list[torch.Tensor]:
    return [torch.randn(8) for _ in range(4)]


def test_an_export_failure_falls_back_to_tracing_and_the_row_names_it() -> None:
    torch.manual_seed(0)
    model = ScalesWithNumpy().eval()
    wrapped, report = tune_alone(model, dataset(), batch_sizes=[1, 4])
    (backend,) = served_by(wrapped)
    assert isinstance(backend, OpenVINOBackend)
    assert backend.build_info["converter"] == "trace"
    (row,) = [c for c in report.graphs[0].candidates if c.backend == "OpenVINOBackend()"]
    assert row.status == "selected" and row.note.startswith("converted by tracing: export: ")
    assert "converted by tracing" in report.summary()
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x))


def test_without_the_fallback_the_candidate_fails_with_the_exports_reason() -> None:
    wrapped = ait.Module(ScalesWithNumpy().eval(), "openvino-no-fallback")
    backends = [OpenVINOBackend(trace_fallback=False), ait.TorchEagerBackend()]
    strategy = ait.FirstWinsStrategy(backends, profile=SHORT_PROFILE).enable_performance_validation(False)
    report = ait.tune(wrapped, dataset(), batch_sizes=[1, 4], strategy=strategy)
    (row,) = [c for c in report.graphs[0].candidates if c.backend.startswith("OpenVINOBackend(")]
    assert row.status == "failed" and row.stage == "build"
    assert "could not convert graph" in row.reason and "export: " in row.reason
