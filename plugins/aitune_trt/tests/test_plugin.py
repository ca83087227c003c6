"""Registration through aitune's plugin hooks, availability reporting, and an import free of TensorRT."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

import pytest
import torch

from aitune_core.testing.child_process import run_python
from aitune_core.testing.engine import PluginStatus, default_candidates, get_backend_class
from aitune_core.testing.packaging import installed_entry_points, pyproject
from aitune_trt import TensorRTBackend
from aitune_trt.availability import tensorrt_availability

ENTRY_POINT = "aitune_trt.plugin"
NOT_IMPORTABLE = "tensorrt not importable (pip install 'aitune-trt[tensorrt]'"
HINT = NOT_IMPORTABLE + ", or the tensorrt-cu12/-cu13 wheel matching your CUDA)"


@pytest.fixture
def registry(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> Any:
    dist = aitune_fake_dist("aitune-trt", entry_points={"tensorrt": ENTRY_POINT})
    return aitune_isolated_plugins.load(dist, strict=True)


def fake_machine(monkeypatch: pytest.MonkeyPatch, tensorrt: bool, cuda: bool, onnx: bool = True) -> None:
    real = importlib.util.find_spec
    hidden = {name for name, present in (("tensorrt", tensorrt), ("onnx", onnx)) if not present}

    def find_spec(name: str, *args: Any) -> Any:
        if name in hidden:
            return None
        return object() if name == "tensorrt" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)


@pytest.mark.parametrize(
    ("tensorrt", "cuda", "device", "reason"),
    [
        (False, False, "cpu", HINT + "; no CUDA device"),
        (False, True, "cuda", HINT),
        (True, False, "cuda", "no CUDA device"),
        (True, True, "cpu", "TensorRT runs on CUDA devices, not cpu"),
        (True, True, "cuda", ""),
    ],
)
def test_availability_gives_every_reason(
    monkeypatch: pytest.MonkeyPatch, tensorrt: bool, cuda: bool, device: str, reason: str
) -> None:
    fake_machine(monkeypatch, tensorrt, cuda)
    availability = TensorRTBackend.availability(device)
    assert availability.available is (reason == "")
    assert availability.reason == reason


def test_the_exporter_dependencies_are_part_of_availability(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_machine(monkeypatch, tensorrt=True, cuda=True, onnx=False)
    assert tensorrt_availability("cuda").reason == (
        "onnx not importable, needed for the ONNX export; pip install onnx onnxscript"
    )


def test_this_machine_reports_why(registry: Any) -> None:
    (record,) = [r for r in registry.records() if r.distribution == "aitune-trt"]
    assert record.name == "tensorrt" and record.backends == ("tensorrt",)
    assert get_backend_class("tensorrt") is TensorRTBackend
    if importlib.util.find_spec("tensorrt") is None or not torch.cuda.is_available():
        assert record.status is PluginStatus.UNAVAILABLE
        assert record.reason.startswith("tensorrt: ")
        assert record.reason.removeprefix("tensorrt: ") == TensorRTBackend.availability("cpu").reason


def test_default_candidates_carry_the_availability(registry: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_machine(monkeypatch, tensorrt=False, cuda=False)
    cpu = default_candidates("cpu")
    assert [c.name for c in cpu] == ["tensorrt", "eager"]
    assert cpu[0].plugin == "aitune-trt" and not cpu[0].available and cpu[0].availability is not None
    reason = cpu[0].availability.reason
    assert reason.startswith(NOT_IMPORTABLE) and reason.endswith("; no CUDA device")
    assert cpu[0].backend.config == TensorRTBackend().config
    cuda = default_candidates("cuda")
    assert [c.name for c in cuda] == ["tensorrt", "eager"] and not cuda[0].available
    assert [c.name for c in default_candidates("mps")] == ["eager"]


def test_an_available_tensorrt_is_offered_first(registry: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_machine(monkeypatch, tensorrt=True, cuda=True)
    (first, *_) = default_candidates("cuda")
    assert first.name == "tensorrt" and first.available


def test_pyproject_declares_the_entry_point_and_the_tensorrt_extra() -> None:
    declared = pyproject(__file__)
    project = declared["project"]
    assert project["name"] == "aitune-trt"
    assert project["entry-points"]["aitune.plugins"] == {"tensorrt": ENTRY_POINT}
    assert project["optional-dependencies"]["tensorrt"] == ["tensorrt"]
    names = [dep.split(">")[0].split("=")[0].strip() for dep in project["dependencies"]]
    assert "aitune-core" in names and "aitune-onnx" in names
    assert not any(name.startswith(("torch", "tensorrt")) for name in names)
    assert "gpu: needs TensorRT and a CUDA device" in " ".join(declared["tool"]["pytest"]["ini_options"]["markers"])
    assert installed_entry_points("aitune-trt") in (None, [("tensorrt", ENTRY_POINT)])


def test_importing_the_plugin_imports_neither_tensorrt_nor_onnx() -> None:
    code = (
        "import sys\n"
        "import aitune_trt, aitune_trt.plugin\n"
        "from aitune_trt import TensorRTBackend\n"
        "TensorRTBackend.availability('cpu'); TensorRTBackend.availability('cuda')\n"
        "aitune_trt.plugin.aitune_default_candidates('cpu')\n"
        "TensorRTBackend(precision='fp16').key()\n"
        "loaded = sorted(m for m in sys.modules\n"
        "                if m.split('.')[0] in ('tensorrt', 'onnx', 'onnxruntime', 'onnxscript')\n"
        "                or m == 'aitune_trt.engine')\n"
        "assert not loaded, loaded\n"
    )
    completed = run_python(code, "aitune_trt", "aitune_onnx")
    assert completed.returncode == 0, completed.stderr[-2000:]
