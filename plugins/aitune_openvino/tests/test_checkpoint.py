"""Checkpoints carry the IR: float32 weights, sealed files, and a load in a fresh process that converts nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from openvino_helpers import served_by, tune_alone

import aitune_core as ait
from aitune_core.testing.child_process import env_with_sources
from aitune_core.testing.models import TinyEncoder, encoder_call
from aitune_openvino import OpenVINOBackend

pytestmark = pytest.mark.slow

LENGTHS = (16, 32, 64)
CHILD = """
import sys
import torch
import aitune_core as ait
import aitune_openvino.backend
from aitune_core.testing.models import TinyEncoder

def never(*args, **kwargs):
    raise AssertionError("loading a checkpoint converted the model again")

aitune_openvino.backend.convert_graph = never
import openvino
openvino.convert_model = never
torch.export.export = never

expected = torch.load(sys.argv[2], weights_only=True)
torch.manual_seed(1234)  # other weights than the tuned model's: the IR must not need them
loaded = ait.load(TinyEncoder().eval(), sys.argv[1])  # no trust_native_code: an IR is data
(backend,) = [route.backend for route in loaded.routes.values()]
assert type(backend).__name__ == "OpenVINOBackend", backend
ait.config.fallback = "raise"
with torch.no_grad():
    for call, output in zip(expected["calls"], expected["outputs"], strict=True):
        got = loaded(**call)
        assert torch.equal(got, output), (got - output).abs().max()
print("ok", backend.compiled.precision)
"""


def _weights_types(xml: Path) -> set[str]:
    """The element types of the IR's constants that hold floating-point weights."""
    root = ET.parse(xml).getroot()
    found = set()
    for layer in root.iter("layer"):
        data = layer.find("data")
        if layer.get("type") == "Const" and data is not None and data.get("element_type", "").startswith(("f", "bf")):
            found.add(data.get("element_type", ""))
    return found


@pytest.fixture(scope="module")
def tuned_encoder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The encoder tuned at three lengths with OpenVINO alone, saved, and what its backend answered."""
    ait.config.cache_dir = tmp_path_factory.mktemp("cache")
    torch.manual_seed(0)
    wrapped, _ = tune_alone(TinyEncoder().eval(), [encoder_call(2, length)[1] for length in LENGTHS])
    (backend,) = served_by(wrapped)
    assert isinstance(backend, OpenVINOBackend)
    folder = tmp_path_factory.mktemp("checkpoint")
    path = ait.save(wrapped, folder / "ckpt")
    calls = [encoder_call(2, length)[1] for length in (16, 24, 64)]
    with torch.no_grad():
        outputs = [wrapped(**call) for call in calls]
    torch.save({"calls": calls, "outputs": outputs}, folder / "expected.pt")
    ait.config.reset()
    return path, folder / "expected.pt"


def _backend_entry(checkpoint: Path) -> dict:
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    (graph,) = manifest["modules"][0]["graphs"]
    return graph["backend"]


def test_the_checkpoint_holds_the_ir_with_float32_weights(tuned_encoder: tuple[Path, Path]) -> None:
    checkpoint, _ = tuned_encoder
    entry = _backend_entry(checkpoint)
    assert entry["name"] == "openvino"
    artifacts = {name: checkpoint / ref["path"] for name, ref in entry["artifacts"].items()}
    assert sorted(artifacts) == ["ir_bin", "ir_xml"]
    assert all(len(ref["sha256"]) == 64 and not ref["native"] for ref in entry["artifacts"].values())
    assert _weights_types(artifacts["ir_xml"]) == {"f32"}
    conversion = entry["extra"]["conversion"]
    assert conversion["converter"] == "export" and conversion["fallback_reason"] == ""
    assert entry["extra"]["layout"]["input_names"] == ["input_ids", "attention_mask"]


def test_a_fresh_process_loads_it_without_converting_and_answers_identically(tuned_encoder: tuple[Path, Path]) -> None:
    """Other weights in the model, convert_model and torch.export made to raise: outputs bit for bit the same."""
    checkpoint, expected = tuned_encoder
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, str(checkpoint), str(expected)],
        capture_output=True,
        text=True,
        env=env_with_sources("aitune_openvino"),
        timeout=300,
    )
    assert completed.returncode == 0 and completed.stdout.strip() == "ok f32", completed.stderr[-3000:]


def test_compressed_weights_are_float16_and_lossy(tmp_path: Path) -> None:
    ait.config.cache_dir = tmp_path / "cache"
    torch.manual_seed(0)
    backend = OpenVINOBackend(compress_to_fp16=True)
    wrapped, report = tune_alone(TinyEncoder().eval(), [encoder_call(2, length)[1] for length in LENGTHS], backend)
    (served,) = served_by(wrapped)
    assert served.lossy and "f16" in _weights_types(served._artifacts()["ir_xml"])
    assert "lossy: max abs error" in report.summary()
