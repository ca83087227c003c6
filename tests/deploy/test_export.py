"""``ait.export`` / ``aitune export --to triton``: a tuned checkpoint as a Triton model repository.

The backends here write a file and describe it (``deploy_backends``); what is checked is
what the export makes of a checkpoint: the folders and files, each ``config.pbtxt`` as
Triton's own ``ModelConfig`` reads it, the batch sizes each artifact won, the two ways of
deploying a graph whose batch ranges went to two backends, and the refusal of a graph
that has no standalone artifact. The plugins' tests run real artifacts with their runtimes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from deploy_backends import FileBackend, InterpretedBackend, OtherFileBackend
from torch import nn

import aitune_core as ait
from aitune_core.cli import main
from aitune_core.profiling import ProfileConfig
from aitune_core.profiling.timer import EAGER, ScriptedTimer
from aitune_core.testing import fixtures
from aitune_core.testing.triton import read_config

pytest.importorskip("tritonclient.grpc", reason="the configs are parsed by Triton's ModelConfig (tritonclient[grpc])")

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins
aitune_clean_plugin_env = fixtures.aitune_clean_plugin_env

FAST = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.001, max_time_s=0.05, max_batch_search=False)
SIZES = [1, 2, 4, 8]
MS = 1e-3
SPLIT = {
    EAGER: {1: 2 * MS, 2: 4 * MS, 4: 8 * MS, 8: 16 * MS},
    "FileBackend()": {1: 1 * MS, 2: 1 * MS, 4: 6 * MS, 8: 12 * MS},
    "OtherFileBackend()": {1: 1.8 * MS, 2: 3 * MS, 4: 2 * MS, 8: 3 * MS},
}
"""FileBackend is fastest at batch 1 and 2, OtherFileBackend at 4 and 8."""


@pytest.fixture
def installed(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> None:
    """The test backends installed as a plugin, so that checkpoints naming them load."""
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-test-deploy", entry_points={"deploy": "deploy_backends"}))


def tuned_checkpoint(tmp_path: Path, name: str, backends: list[Any], timer: ScriptedTimer | None = None) -> Path:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    module = ait.Module(model, name)
    strategy = ait.MaxThroughputStrategy(backends, profile=FAST, timer=timer)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=SIZES, strategy=strategy)
    ait.save(module, tmp_path / "ckpt")
    return tmp_path / "ckpt"


def folder_name(module: str) -> str:
    """The model's name in the repository: the module's, with what a folder name cannot hold as ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", module).strip("._")


def split_timer() -> ScriptedTimer:
    return ScriptedTimer({name: table.__getitem__ for name, table in SPLIT.items()})


@pytest.mark.usefixtures("installed")
def test_one_graph_is_one_triton_model_with_its_files_and_a_config_triton_reads(
    tmp_path: Path, unique_name: Callable[..., str]
) -> None:
    name = unique_name("cnn")
    checkpoint = tuned_checkpoint(tmp_path, name, [FileBackend(threads=2)])
    summary = ait.export(checkpoint, "triton", tmp_path / "repo", options={"instances": 3, "max_queue_delay_us": 50})

    folder = tmp_path / "repo" / folder_name(name)
    assert sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*")) == [
        "1",
        "1/model.onnx",
        "config.pbtxt",
    ]
    config = read_config(folder)
    assert (config.name, config.platform, config.max_batch_size) == (folder_name(name), "onnxruntime_onnx", 8)
    assert [(t.name, list(t.dims)) for t in config.input] == [("input", [8])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("output", [4])]
    assert list(config.dynamic_batching.preferred_batch_size) == SIZES
    assert config.dynamic_batching.max_queue_delay_microseconds == 50
    assert [(group.count, group.kind) for group in config.instance_group] == [(3, 2)]  # KIND_CPU
    assert config.parameters["intra_op_thread_count"].string_value == "2"
    assert [model.name for model in summary.models] == [folder_name(name)]
    assert "Won at" in str(summary) and "1, 2, 4, 8" in str(summary)


@pytest.mark.usefixtures("installed")
def test_a_graph_split_between_two_backends_goes_to_the_widest_route_or_one_model_each(
    tmp_path: Path, unique_name: Callable[..., str]
) -> None:
    name = folder_name(unique_name("split"))
    checkpoint = tuned_checkpoint(tmp_path, name, [FileBackend(), OtherFileBackend()], split_timer())

    widest = ait.export(checkpoint, "triton", tmp_path / "widest")
    (model,) = widest.models
    config = read_config(tmp_path / "widest" / name)
    assert (model.backend, config.backend, config.max_batch_size) == ("OtherFileBackend()", "openvino", 8)
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]  # where it won, not where FileBackend did
    assert sorted(path.name for path in (tmp_path / "widest" / name / "1").iterdir()) == ["model.bin", "model.xml"]
    assert any("batch 1-2: FileBackend() won there" in note for note in model.notes), model.notes
    assert "batch 1-2: FileBackend() won there" in str(widest)

    each = ait.export(checkpoint, "triton", tmp_path / "each", ranges="each")
    assert [(m.name, m.min_batch, m.max_batch, m.batch_sizes) for m in each.models] == [
        (f"{name}_test_deploy_file", 1, 2, (1, 2)),
        (f"{name}_test_deploy_other", 3, 8, (4, 8)),
    ]
    low = read_config(tmp_path / "each" / f"{name}_test_deploy_file")
    assert (low.platform, low.max_batch_size, list(low.dynamic_batching.preferred_batch_size)) == (
        "onnxruntime_onnx",
        2,
        [1, 2],
    )
    assert any("send batch 3-8 here" in note for note in each.models[1].notes), each.models[1].notes


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("winner", ["interpreted", "eager"])
def test_a_graph_without_a_standalone_artifact_is_refused_with_its_fix_and_nothing_is_written(
    tmp_path: Path, unique_name: Callable[..., str], winner: str
) -> None:
    name = unique_name("jit")
    backends = [InterpretedBackend()] if winner == "interpreted" else [ait.TorchEagerBackend()]
    checkpoint = tuned_checkpoint(tmp_path, name, backends)
    with pytest.raises(ait.DeployError) as refused:
        ait.export(checkpoint, "triton", tmp_path / "repo")
    message = str(refused.value)
    assert f"module `{name}`, graph `0` has no standalone artifact" in message
    expected = "InterpretedBackend()" if winner == "interpreted" else "TorchEagerBackend()"
    assert f"batch 1-8: {expected} serves from the module's own Python code" in message
    assert "MaxThroughputStrategy(backends=[" in message and "aitune serve CKPT --factory" in message
    assert not (tmp_path / "repo").exists()


@pytest.mark.usefixtures("installed")
def test_models_already_in_the_repository_are_replaced_only_when_asked(
    tmp_path: Path, unique_name: Callable[..., str]
) -> None:
    name = folder_name(unique_name("again"))
    checkpoint = tuned_checkpoint(tmp_path, name, [FileBackend()])
    repo = tmp_path / "repo"
    (repo / "someone_elses").mkdir(parents=True)
    ait.export(checkpoint, "triton", repo)
    (repo / name / "config.pbtxt").write_text("edited")
    with pytest.raises(ait.DeployError, match=f"already holds {name}.*overwrite=True"):
        ait.export(checkpoint, "triton", repo)
    assert (repo / name / "config.pbtxt").read_text() == "edited"
    ait.export(checkpoint, "triton", repo, overwrite=True)
    assert read_config(repo / name).name == name
    assert sorted(path.name for path in repo.iterdir()) == sorted([name, "someone_elses"])


@pytest.mark.usefixtures("installed")
def test_the_command_exports_with_target_options_and_says_what_it_wrote(
    tmp_path: Path, unique_name: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = folder_name(unique_name("cli"))
    checkpoint = tuned_checkpoint(tmp_path, name, [FileBackend()])
    repo = tmp_path / "repo"
    assert main(["export", str(checkpoint), str(repo), "--to", "triton", "-o", "instances=2"]) == 0
    assert f"Exported 1 model(s) to triton repository {repo}" in capsys.readouterr().out
    assert read_config(repo / name).instance_group[0].count == 2
    assert main(["export", str(checkpoint), str(repo), "--to", "triton", "-o", "cores=2"]) == 1
    assert "not KEY=VALUE with a KEY of this target (its options: instances" in capsys.readouterr().err
    assert main(["export", str(checkpoint), str(repo), "--to", "ovms"]) == 1
    assert "unknown deploy target 'ovms' (installed: triton)" in capsys.readouterr().err


@pytest.mark.usefixtures("aitune_clean_plugin_env")
def test_the_core_lists_its_triton_target(capsys: pytest.CaptureFixture[str], aitune_isolated_plugins: Any) -> None:
    aitune_isolated_plugins.load()
    assert main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    (core,) = [plugin for plugin in listing["plugins"] if plugin["builtin"]]
    assert core["targets"] == ["triton"]
