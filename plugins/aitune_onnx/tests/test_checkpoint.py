"""aitune_core.save, then aitune_core.load in a fresh process: the .onnx file deploys with no export."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core import ProfileConfig
from aitune_core.testing.fake_dists import write_fake_dist
from aitune_onnx import ONNXRuntimeBackend

pytestmark = pytest.mark.slow


def _installed() -> bool:
    try:
        importlib.metadata.distribution("aitune-onnx")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


INSTALLED = _installed()
"""Asked at import, before any test puts a fake aitune-onnx distribution on the path."""

MODEL_SOURCE = """
import torch


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 16)  # 512 bytes of weights: enough to go to external data

    def forward(self, values, double=False):
        x, extra = values
        hidden = torch.relu(self.proj(x))
        pairs = extra["pairs"].view(x.shape[0], 2, -1).sum(dim=1)
        return {"hidden": hidden, "extra": (pairs * (2 if double else 1), hidden.mean(dim=1)), "tag": "enc"}


class Pipeline(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()

    def forward(self, x, pairs):
        return self.encoder((x, {"pairs": pairs}), double=True)
"""

RESTORE_SCRIPT = """
import sys
import torch
import torch.onnx


def refuse(*args, **kwargs):
    raise AssertionError("loading a checkpoint must not export")


torch.onnx.export = refuse

import aitune_core as ait
from ckpt_model import Pipeline

torch.manual_seed(123)  # other weights than the tuned model's: load must replace them
model = Pipeline().eval()
io = torch.load(sys.argv[2], weights_only=True)
with torch.no_grad():
    before = model(io["x"], io["pairs"])
assert not torch.allclose(before["hidden"], io["hidden"]), "the fresh model should differ before loading"
ait.load(model, sys.argv[1])
backend = model.encoder.backends[next(iter(model.encoder.backends))]
assert type(backend).__name__ == "ONNXRuntimeBackend", type(backend)
assert backend.state.name == "DEPLOYED", backend.state
assert backend.exported is None  # restored from the artifact, not exported
with torch.no_grad():
    out = model(io["x"], io["pairs"])
torch.testing.assert_close(out["hidden"], io["hidden"], rtol=1e-4, atol=1e-5)
torch.testing.assert_close(out["extra"][0], io["extra0"], rtol=1e-4, atol=1e-5)
torch.testing.assert_close(out["extra"][1], io["extra1"], rtol=1e-4, atol=1e-5)
assert isinstance(out["extra"], tuple) and out["tag"] == "enc"
print("restored", backend.state.name, backend.session.get_providers()[0])
"""


def test_save_then_load_in_a_fresh_process(
    tmp_path: Path, aitune_fake_dist: Any, aitune_isolated_plugins: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ckpt_model.py").write_text(textwrap.dedent(MODEL_SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    from ckpt_model import Pipeline  # type: ignore[import-not-found]

    aitune_isolated_plugins.load(aitune_fake_dist("aitune-onnx", entry_points={"onnx": "aitune_onnx.plugin"}))
    torch.manual_seed(0)
    model = Pipeline().eval()
    model.encoder = ait.Module(model.encoder, "encoder")
    strategy = ait.OneBackendStrategy(
        ONNXRuntimeBackend(external_data="always"), profile=ProfileConfig(max_time_s=0.02, max_batch_search=False)
    )
    strategy.enable_performance_validation(False)
    dataset = [(torch.randn(8), torch.randn(2, 3)) for _ in range(8)]

    def pipeline(x: torch.Tensor, pairs: torch.Tensor) -> Any:
        return model(x, pairs.reshape(-1, 3))

    ait.tune(pipeline, dataset, batch_sizes=[2, 4, 8], strategy=strategy)
    checkpoint = ait.save(model, tmp_path / "checkpoint")
    stored = sorted(path.name for path in (checkpoint / "modules").rglob("*.onnx*"))
    assert stored == ["model.onnx", "model.onnx.data"]

    x, pairs = torch.randn(5, 8), torch.randn(10, 3)
    with torch.no_grad():
        expected = model(x, pairs)
    torch.save(
        {
            "x": x,
            "pairs": pairs,
            "hidden": expected["hidden"],
            "extra0": expected["extra"][0],
            "extra1": expected["extra"][1],
        },
        tmp_path / "io.pt",
    )
    (tmp_path / "restore.py").write_text(textwrap.dedent(RESTORE_SCRIPT))
    completed = subprocess.run(
        [sys.executable, str(tmp_path / "restore.py"), str(checkpoint), str(tmp_path / "io.pt")],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=300,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip().endswith("restored DEPLOYED CPUExecutionProvider")


def _env(tmp_path: Path) -> dict[str, str]:
    """The sources on the path, and the plugin's entry point when it is not installed."""
    import aitune_core
    import aitune_onnx

    paths = [str(tmp_path)]
    paths += [os.path.dirname(os.path.dirname(module.__file__ or "")) for module in (aitune_core, aitune_onnx)]
    if not INSTALLED:
        dist = write_fake_dist(tmp_path / "dists", "aitune-onnx", entry_points={"onnx": "aitune_onnx.plugin"})
        paths.append(str(dist.path))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
