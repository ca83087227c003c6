"""Registration through aitune's plugin hooks, as an installed distribution is found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from aitune_core.testing.child_process import env_with_sources, run_python
from aitune_core.testing.engine import PluginStatus, default_candidates, get_backend_class
from aitune_core.testing.packaging import installed_entry_points, pyproject
from aitune_torchao import PRESETS, TorchAOBackend

ENTRY_POINT = "aitune_torchao.plugin"


@pytest.fixture
def dist(aitune_fake_dist: Any) -> Any:
    return aitune_fake_dist("aitune-torchao", entry_points={"torchao": ENTRY_POINT})


def test_registers_the_backend(dist: Any, aitune_isolated_plugins: Any) -> None:
    registry = aitune_isolated_plugins.load(dist, strict=True)
    (record,) = [r for r in registry.records() if r.distribution == "aitune-torchao"]
    assert (record.name, record.status, record.backends) == ("torchao", PluginStatus.LOADED, ("torchao",))
    assert get_backend_class("torchao") is TorchAOBackend


def test_one_default_candidate_per_preset_with_its_availability(dist: Any, aitune_isolated_plugins: Any) -> None:
    aitune_isolated_plugins.load(dist, strict=True)
    candidates = default_candidates("cpu")
    compiled = {"int8dq": ",compile=True"}  # on a CPU, int8 pays where Inductor fuses it (presets.COMPILED_ON_CPU)
    assert [c.backend.describe() for c in candidates] == [
        *(f"TorchAOBackend(preset={name!r}{compiled.get(name, '')})" for name in PRESETS),
        "TorchEagerBackend()",
    ]
    assert all(c.plugin == "aitune-torchao" for c in candidates[:-1])
    by_preset = {c.backend.config.preset: c for c in candidates[:-1]}  # type: ignore[attr-defined]
    assert [name for name, c in by_preset.items() if c.available] == ["int8wo", "int8dq"]
    assert by_preset["fp8dq"].availability is not None
    assert by_preset["fp8dq"].availability.reason == "preset 'fp8dq' needs CUDA with compute capability >= 8.9, not cpu"
    assert [c.name for c in default_candidates("mps")] == ["eager"]
    assert not any(c.backend.config.compile for c in default_candidates("cuda")[:-1])  # type: ignore[attr-defined]


def run_cli(dist: Any, *args: str) -> subprocess.CompletedProcess[str]:
    environ = env_with_sources("aitune_torchao")
    environ["PYTHONPATH"] = os.pathsep.join([str(dist.path), environ["PYTHONPATH"]])
    return subprocess.run(
        [sys.executable, "-m", "aitune_core.cli", "plugins", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )


def test_aitune_plugins_lists_the_presets_and_why_some_cannot_run(dist: Any) -> None:
    result = run_cli(dist, "--json", "--candidates", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    (record,) = [p for p in payload["plugins"] if p["distribution"] == "aitune-torchao"]
    assert (record["status"], record["backends"]) == ("loaded", ["torchao"])
    assert payload["device"] == "cpu"
    rows = {c["backend"]: c for c in payload["candidates"] if c["plugin"] == "aitune-torchao"}
    assert len(rows) == len(PRESETS)
    assert rows["TorchAOBackend(preset='int8wo')"]["available"] is True
    assert rows["TorchAOBackend(preset='int4wo')"] == {
        "backend": "TorchAOBackend(preset='int4wo')",
        "name": "torchao",
        "plugin": "aitune-torchao",
        "priority": rows["TorchAOBackend(preset='int4wo')"]["priority"],
        "available": False,
        "reason": "preset 'int4wo' needs CUDA, not cpu",
    }
    table = run_cli(dist, "--candidates", "--device", "cpu")
    assert table.returncode == 0, table.stderr
    text = " ".join(table.stdout.split())
    assert "Default candidates for cpu" in text
    assert "TorchAOBackend(preset='mxfp8') aitune-torchao 86 no preset 'mxfp8' needs CUDA with compute" in text


def test_importing_the_plugin_does_not_import_torchao() -> None:
    code = (
        "import sys, aitune_torchao, aitune_torchao.plugin; "
        "from aitune_torchao import TorchAOBackend; "
        "b = TorchAOBackend(preset='int8dq'); b.key(); b.describe(); b.availability('cpu'); "
        "print('torchao' in sys.modules)"
    )
    result = run_python(code, "aitune_torchao")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_pyproject_declares_the_entry_point_and_no_torch_pin() -> None:
    declared = pyproject(__file__)
    project = declared["project"]
    assert project["name"] == "aitune-torchao"
    assert project["entry-points"]["aitune.plugins"] == {"torchao": ENTRY_POINT}
    assert not [d for d in project["dependencies"] if d.split("[")[0].split(">")[0].split("=")[0] == "torch"]
    assert any(d.startswith("torchao") for d in project["dependencies"])
    assert installed_entry_points("aitune-torchao") in (None, [("torchao", ENTRY_POINT)])
