"""Registration through aitune's entry point, the default candidates, and a plugin that imports no OpenVINO."""

from __future__ import annotations

from typing import Any

import pytest

from aitune_core.testing.child_process import run_python
from aitune_core.testing.engine import PluginStatus, default_candidates, get_backend_class
from aitune_core.testing.packaging import installed_entry_points, pyproject
from aitune_openvino import OpenVINOBackend
from aitune_openvino.availability import precision_availability
from aitune_openvino.plugin import BF16_PRIORITY, PRIORITY

ENTRY_POINT = "aitune_openvino.plugin"
OPENVINO_MODULES = "sorted(m for m in sys.modules if m.split('.')[0] == 'openvino')"


@pytest.fixture
def registry(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> Any:
    dist = aitune_fake_dist("aitune-openvino", entry_points={"openvino": ENTRY_POINT})
    return aitune_isolated_plugins.load(dist, strict=True)


def test_registers_the_backend(registry: Any) -> None:
    (record,) = [r for r in registry.records() if r.distribution == "aitune-openvino"]
    assert record.name == "openvino" and record.backends == ("openvino",)
    assert record.status is PluginStatus.LOADED, record.reason
    assert get_backend_class("openvino") is OpenVINOBackend


def test_default_candidates_on_cpu(registry: Any) -> None:
    """The lossless config first; bf16 after it, lossy, available only where the CPU computes bf16."""
    candidates = default_candidates("cpu")
    assert [(c.name, c.priority) for c in candidates] == [
        ("openvino", PRIORITY),
        ("openvino", BF16_PRIORITY),
        ("eager", 0),
    ]
    exact, bf16 = candidates[0].backend, candidates[1].backend
    assert exact.config == OpenVINOBackend().config and not exact.lossy and candidates[0].available
    assert bf16.config.inference_precision == "bf16" and bf16.lossy
    assert candidates[1].availability == precision_availability("bf16")


def test_no_candidate_off_the_cpu(registry: Any) -> None:
    for device in ("cuda", "meta"):
        assert [c.name for c in default_candidates(device)] == ["eager"]
    assert "runs on cpu, not cuda" in OpenVINOBackend.availability("cuda").reason


def test_pyproject_declares_the_entry_point() -> None:
    declared = pyproject(__file__)
    assert declared["project"]["entry-points"]["aitune.plugins"] == {"openvino": ENTRY_POINT}
    assert not any(dep.startswith("torch") for dep in declared["project"]["dependencies"])
    assert declared["tool"]["aitune"]["nox"]["backends"] == ["openvino"]
    assert installed_entry_points("aitune-openvino") in (None, [("openvino", ENTRY_POINT)])


def test_importing_the_plugin_imports_no_openvino() -> None:
    code = (
        "import sys, aitune_core, aitune_openvino, aitune_openvino.plugin\n"
        "from aitune_openvino import OpenVINOBackend\n"
        "assert OpenVINOBackend.availability('cpu').available\n"
        f"assert not {OPENVINO_MODULES}, {OPENVINO_MODULES}\n"
    )
    completed = run_python(code, "aitune_openvino")
    assert completed.returncode == 0, completed.stderr[-2000:]


def test_listing_plugins_imports_no_openvino() -> None:
    """``aitune plugins`` loads every installed plugin, this one included, and still imports no OpenVINO."""
    if installed_entry_points("aitune-openvino") is None:
        pytest.skip("aitune-openvino is not installed, so `aitune plugins` would not load it")
    code = (
        "import sys\n"
        "from aitune_core.cli import main\n"
        "assert main(['plugins']) == 0\n"
        "import aitune_core\n"
        "(record,) = [r for r in aitune_core.plugins() if r.distribution == 'aitune-openvino']\n"
        "assert record.status.value == 'loaded', record\n"
        f"assert not {OPENVINO_MODULES}, {OPENVINO_MODULES}\n"
    )
    completed = run_python(code, "aitune_openvino")
    assert completed.returncode == 0, completed.stdout[-1000:] + completed.stderr[-2000:]
    assert "aitune-openvino" in completed.stdout
