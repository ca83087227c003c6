"""A deploy target from a third party: a project written by ``aitune new-plugin``, with a target added to it.

The target stands for another server (a model server reading one JSON file per model).
It uses only ``aitune_core.plugin_api.deploy``, registers through the hook, and must then
be listed by ``aitune plugins`` and chosen by ``aitune export --to`` with its own options,
exactly as the core's Triton target is.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from deploy_backends import FileBackend
from torch import nn

import aitune_core as ait
from aitune_core.authoring.new_plugin import write_plugin
from aitune_core.cli import main
from aitune_core.profiling import ProfileConfig
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins

TARGET = '''

# ----------------------------------------------------------------------------- a deploy target
import json
import shutil

import attrs
from aitune_core.plugin_api.deploy import DeployTarget


@attrs.frozen
class ServerOptions:
    copies: int = 1


class ServerTarget(DeployTarget):
    """One folder per model: its files and a ``model.json`` the server reads."""

    name = "demo_server"
    formats = ("onnx", "openvino_ir")
    options_class = ServerOptions

    def write_model(self, model, folder):
        target = folder / model.name
        target.mkdir()
        for name, source in model.deployable.files.items():
            shutil.copyfile(source, target / name)
        described = {
            "entry": model.deployable.entry,
            "inputs": [[t.name, str(t.dtype), list(t.max_shape)] for t in model.deployable.inputs],
            "batch_sizes": list(model.batch_sizes),
            "copies": self.options.copies,
        }
        (target / "model.json").write_text(json.dumps(described))
        return [f"{model.name}: {self.options.copies} copies"]


@hookimpl
def aitune_register_targets():
    return [ServerTarget]
'''


@pytest.fixture
def kit_plugin(tmp_path: Path, aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> str:
    """The kit's project for ``aitune-demo-server`` with a target added, installed beside the test backends."""
    names, project, _ = write_plugin("aitune-demo-server", tmp_path / "projects")
    plugin = project / names.package / "plugin.py"
    plugin.write_text(plugin.read_text() + textwrap.dedent(TARGET))
    server = aitune_fake_dist("aitune-demo-server", entry_points={names.plugin: f"{names.package}.plugin"})
    (server.path / names.package).symlink_to(project / names.package, target_is_directory=True)
    backends = aitune_fake_dist("aitune-test-deploy", entry_points={"deploy": "deploy_backends"})
    aitune_isolated_plugins.load(server, backends)
    return names.distribution


def test_a_target_made_with_the_kit_is_listed_and_exports(
    kit_plugin: str, tmp_path: Path, unique_name: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plugins", "--json"]) == 0
    records = {plugin["distribution"]: plugin for plugin in json.loads(capsys.readouterr().out)["plugins"]}
    assert (records[kit_plugin]["status"], records[kit_plugin]["targets"]) == ("loaded", ["demo_server"])
    assert records[kit_plugin]["backends"] == ["demo_server"]  # the kit's own backend is there too

    name = unique_name("served").replace(":", "_")
    module = ait.Module(nn.Sequential(nn.Linear(8, 4)).eval(), name)
    profile = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.001, max_time_s=0.05, max_batch_search=False)
    strategy = ait.MaxThroughputStrategy([FileBackend()], profile=profile)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=[2, 4], strategy=strategy)
    ait.save(module, tmp_path / "ckpt")

    repo = tmp_path / "served"
    assert main(["export", str(tmp_path / "ckpt"), str(repo), "--to", "demo_server", "-o", "copies=3"]) == 0
    assert f"{name}: 3 copies" in capsys.readouterr().out
    assert sorted(path.name for path in (repo / name).iterdir()) == ["model.json", "model.onnx"]
    described = json.loads((repo / name / "model.json").read_text())
    assert described == {
        "entry": "model.onnx",
        "inputs": [["input", "torch.float32", [4, 8]]],
        "batch_sizes": [2, 4],
        "copies": 3,
    }
