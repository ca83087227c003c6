"""Registration through aitune's plugin hooks, as an installed distribution is found, and a light import."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from aitune_core.testing.child_process import run_python
from aitune_core.testing.engine import PluginStatus, default_candidates, get_backend_class
from aitune_core.testing.packaging import installed_entry_points, pyproject
from aitune_onnx import ONNXRuntimeBackend

ENTRY_POINT = "aitune_onnx.plugin"


@pytest.fixture
def registry(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> Any:
    dist = aitune_fake_dist("aitune-onnx", entry_points={"onnx": ENTRY_POINT})
    return aitune_isolated_plugins.load(dist, strict=True)


def test_registers_the_backend(registry: Any) -> None:
    (record,) = [r for r in registry.records() if r.distribution == "aitune-onnx"]
    assert record.name == "onnx"
    assert record.backends == ("onnxruntime",)
    # Unavailable is right on a CUDA machine whose onnxruntime build has no CUDA provider.
    assert record.status in (PluginStatus.LOADED, PluginStatus.UNAVAILABLE)
    if not torch.cuda.is_available():
        assert record.status is PluginStatus.LOADED
    assert get_backend_class("onnxruntime") is ONNXRuntimeBackend


def test_default_candidates(registry: Any) -> None:
    cpu = default_candidates("cpu")
    assert [c.name for c in cpu] == ["onnxruntime", "eager"]
    assert cpu[0].available and cpu[0].plugin == "aitune-onnx"
    assert cpu[0].backend.config.provider == "cpu"
    cuda = default_candidates("cuda")
    assert [c.name for c in cuda] == ["onnxruntime", "eager"]
    assert cuda[0].backend.config.provider == "cuda"
    if not torch.cuda.is_available():
        assert not cuda[0].available and "no CUDA device" in cuda[0].availability.reason
    assert [c.name for c in default_candidates("mps")] == ["eager"]


def test_pyproject_declares_the_entry_point() -> None:
    declared = pyproject(__file__)
    assert declared["project"]["entry-points"]["aitune.plugins"] == {"onnx": ENTRY_POINT}
    assert not any(dep.startswith("torch") for dep in declared["project"]["dependencies"])
    assert installed_entry_points("aitune-onnx") in (None, [("onnx", ENTRY_POINT)])


def test_importing_the_plugin_imports_no_onnx() -> None:
    code = (
        "import sys, aitune_onnx, aitune_onnx.plugin\n"
        "from aitune_onnx import ONNXRuntimeBackend\n"
        "assert ONNXRuntimeBackend.availability('cpu').available\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime', 'onnxscript'))\n"
        "assert not loaded, loaded\n"
    )
    completed = run_python(code, "aitune_onnx")
    assert completed.returncode == 0, completed.stderr[-2000:]
