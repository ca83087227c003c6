"""A checkpoint is data: edited manifests and files are refused, or load with the same answers.

Every string of a saved manifest is replaced by hostile values (paths out of the
checkpoint, shell text, other types) by aitune's checkpoint fuzzer; beside it, the
edits an IR invites: weights swapped for other bytes, an XML past the size an IR's
graph can have, and a stored layout that reads other inputs than the graph's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.checkpoint_fuzz import TunedCheckpoint, assert_tuned_checkpoint_survives_fuzzing, tune_and_save
from aitune_openvino import OpenVINOBackend
from aitune_openvino import backend as backend_module

pytestmark = pytest.mark.slow


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()


@pytest.fixture
def saved(tmp_path: Path) -> TunedCheckpoint:
    return tune_and_save(build_model, 8, OpenVINOBackend(), tmp_path, "openvino-attacked")


def _manifest(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "manifest.json").read_text())


def _backend_entry(manifest: dict) -> dict:
    (graph,) = manifest["modules"][0]["graphs"]
    return graph["backend"]


def test_fuzzed_manifests_are_refused_or_load_harmlessly(saved: TunedCheckpoint, tmp_path: Path) -> None:
    assert_tuned_checkpoint_survives_fuzzing(build_model, saved, tmp_path, rtol=1e-5, atol=1e-5)


def test_swapped_weights_are_refused(saved: TunedCheckpoint) -> None:
    entry = _backend_entry(_manifest(saved.path))
    weights = saved.path / entry["artifacts"]["ir_bin"]["path"]
    data = bytearray(weights.read_bytes())
    data[:4] = bytes(byte ^ 0x5A for byte in data[:4])  # other numbers, same size
    weights.write_bytes(bytes(data))
    with pytest.raises(ait.CheckpointError, match="sha256"):
        ait.load(build_model(), saved.path)


def test_an_oversized_ir_graph_is_refused_before_openvino_reads_it(
    saved: TunedCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The XML holds the graph only: past the limit (lowered here to this small model's size) it is not read."""
    entry = _backend_entry(_manifest(saved.path))
    size = (saved.path / entry["artifacts"]["ir_xml"]["path"]).stat().st_size
    monkeypatch.setattr(backend_module, "MAX_XML_BYTES", size - 1)
    with pytest.raises((ait.CheckpointError, ValueError), match=r"refusing IR graph model\.xml"):
        ait.load(build_model(), saved.path)
    monkeypatch.setattr(backend_module, "MAX_XML_BYTES", size)
    loaded = ait.load(build_model(), saved.path)
    with torch.no_grad():
        torch.testing.assert_close(loaded(saved.x), saved.y)


def test_a_layout_that_reads_other_inputs_is_refused(saved: TunedCheckpoint) -> None:
    manifest = _manifest(saved.path)
    layout = _backend_entry(manifest)["extra"]["layout"]
    layout["inputs"][0]["root"] = "not_an_input"
    (saved.path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises((ait.CheckpointError, ValueError), match="stored input layout reads"):
        ait.load(build_model(), saved.path)
