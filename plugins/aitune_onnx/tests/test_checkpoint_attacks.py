"""A checkpoint is data: an edited ``external_data_location`` must not reach any file outside it.

The ONNX backend stores the name its external data file goes by next to the model.
Loading used to link the weights to that name, after removing whatever was there, so
an absolute path or a ``..`` path in an edited manifest replaced any file the user
could write. Each test edits only that value and expects ``load`` to refuse it while
the canary file, and the canary folder, stay exactly as they were.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core import ProfileConfig
from aitune_onnx import ONNXRuntimeBackend

pytestmark = pytest.mark.slow

CANARY_BYTES = b"precious, must survive loading a checkpoint\n"


def _make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


@pytest.fixture
def checkpoint(tmp_path: Path, aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> Path:
    """A saved checkpoint of a tiny model whose weights went to an external data file."""
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-onnx", entry_points={"onnx": "aitune_onnx.plugin"}))
    torch.manual_seed(0)
    module = ait.Module(_make_model(), "attacked")
    strategy = ait.OneBackendStrategy(
        ONNXRuntimeBackend(external_data="always"), profile=ProfileConfig(max_time_s=0.02, max_batch_search=False)
    )
    strategy.enable_performance_validation(False)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=[2, 4], strategy=strategy)
    path = ait.save(module, tmp_path / "checkpoint")
    extra = _backend_entry(path)["extra"]
    assert extra["external_data_location"] == "model.onnx.data"
    assert sorted(p.name for p in path.rglob("*.onnx*")) == ["model.onnx", "model.onnx.data"]
    return path


def _backend_entry(checkpoint: Path) -> dict[str, Any]:
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    (graph,) = manifest["modules"][0]["graphs"]
    return graph["backend"]


def _set_location(checkpoint: Path, location: str) -> None:
    """Edit the manifest's ``external_data_location``, and nothing else."""
    text = (checkpoint / "manifest.json").read_text()
    edited = text.replace(
        '"external_data_location": "model.onnx.data"', f'"external_data_location": {json.dumps(location)}'
    )
    assert edited != text and text.count('"external_data_location"') == 1
    (checkpoint / "manifest.json").write_text(edited)
    assert _backend_entry(checkpoint)["extra"]["external_data_location"] == location


def _canary(tmp_path: Path) -> tuple[Path, Path, os.stat_result]:
    folder = tmp_path / "canary-dir"
    folder.mkdir()
    canary = folder / "canary"
    canary.write_bytes(CANARY_BYTES)
    return folder, canary, canary.stat()


def _assert_untouched(folder: Path, canary: Path, before: os.stat_result) -> None:
    assert canary.read_bytes() == CANARY_BYTES
    after = canary.stat()
    assert (after.st_ino, after.st_dev, after.st_nlink) == (before.st_ino, before.st_dev, before.st_nlink)
    assert sorted(path.name for path in folder.iterdir()) == ["canary"]


def _load_refused(checkpoint: Path) -> None:
    with pytest.raises((ait.CheckpointError, ValueError), match="external_data_location"):
        ait.load(_make_model(), checkpoint)


def test_an_absolute_location_is_refused_and_the_file_there_survives(checkpoint: Path, tmp_path: Path) -> None:
    folder, canary, before = _canary(tmp_path)
    _set_location(checkpoint, str(canary))
    _load_refused(checkpoint)
    _assert_untouched(folder, canary, before)


def test_a_location_climbing_out_with_dotdot_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    """Enough ``..`` to reach the root from any cache folder, then down into the canary folder."""
    folder, canary, before = _canary(tmp_path)
    _set_location(checkpoint, "../" * 64 + str(folder / "pwned").lstrip("/"))
    _load_refused(checkpoint)
    _assert_untouched(folder, canary, before)


@pytest.mark.parametrize("location", ["../../canary", "..", "sub/model.onnx.data", "model.onnx", "bad\x00name"])
def test_any_location_but_a_plain_file_name_is_refused(checkpoint: Path, tmp_path: Path, location: str) -> None:
    folder, canary, before = _canary(tmp_path)
    _set_location(checkpoint, location)
    _load_refused(checkpoint)
    _assert_untouched(folder, canary, before)


def test_the_untouched_checkpoint_still_loads_and_runs(checkpoint: Path) -> None:
    """The checks refuse only edited values: the saved checkpoint loads and matches eager."""
    torch.manual_seed(0)
    expected_model = _make_model()
    loaded = ait.load(_make_model(), checkpoint)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), expected_model(x), rtol=1e-4, atol=1e-5)
