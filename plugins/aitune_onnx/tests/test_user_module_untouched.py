"""Tuning with ONNX Runtime leaves the user's model in the mode it was given.

The TorchScript exporter sets the exported module to eval and back to its original mode,
recursively; the export adapter must not hand it a training flag of its own.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.models import TinyMLP, mlp_call
from aitune_core.testing.recording import record
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_onnx import ExportConfig, ONNXRuntimeBackend, export_graph

pytestmark = pytest.mark.slow

_names = itertools.count()


def dropout_model() -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4)).eval()


def test_the_torchscript_exporter_leaves_the_model_in_eval_mode() -> None:
    model = dropout_model()
    wrapped = ait.Module(model, f"onnx-modes-{next(_names)}")
    strategy = ait.MaxThroughputStrategy(
        [ONNXRuntimeBackend(exporter="torchscript"), ait.TorchEagerBackend()], profile=SHORT_PROFILE
    )
    report = ait.tune(wrapped, [torch.randn(16) for _ in range(8)], batch_sizes=[2, 4], strategy=strategy)

    assert not model.training
    assert [name for name, m in model.named_modules() if m.training] == []
    onnx_row = next(row for row in report.graphs[0].candidates if row.backend.startswith("ONNXRuntimeBackend"))
    assert onnx_row.status in ("selected", "passed", "rejected"), onnx_row
    assert onnx_row.stage != "build", onnx_row.reason
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert torch.equal(model(x), model(x))  # Dropout is off in later eager calls


def test_export_keeps_every_submodule_mode(tmp_path: Path) -> None:
    """A submodule the user keeps in another mode than its parent keeps it after an export."""
    model = TinyMLP().eval()
    context = record(model, mlp_call, (2, 4), tmp_path / "cache")
    model.down.train()
    modes = {name: m.training for name, m in model.named_modules()}
    export_graph(
        model,
        context.graph_spec,
        context.samples,
        context.signature,
        tmp_path / "model.onnx",
        ExportConfig(exporter="torchscript"),
    )
    assert {name: m.training for name, m in model.named_modules()} == modes
