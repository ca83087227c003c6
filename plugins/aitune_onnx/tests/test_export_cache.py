"""The export cache: candidates share one export, a bad entry is exported again, the key tells models apart."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

import aitune_onnx.export_cache as export_cache
from aitune_core.plugin_api import BuildContext
from aitune_core.testing.engine import capture
from aitune_onnx import ExportConfig, ONNXRuntimeBackend
from aitune_onnx.export_key import export_key

pytestmark = pytest.mark.slow


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths ``export_graph`` was asked to write, in order: one per export that ran."""
    calls: list[Path] = []
    real = export_cache.export_graph

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(Path(args[4]))
        return real(*args, **kwargs)

    monkeypatch.setattr(export_cache, "export_graph", counting)
    return calls


def _in_build_folder(context: BuildContext, cache: Path, build: str) -> BuildContext:
    """The context as tuning makes it: a private folder under ``<cache>/builds/<identity>/``."""
    return attrs.evolve(context, cache_dir=cache / "builds" / "identity" / build)


def _entries(cache: Path) -> list[Path]:
    root = cache / export_cache.EXPORTS
    return sorted(path for path in root.iterdir() if not path.name.startswith(".")) if root.is_dir() else []


def _check_matches_eager(backend: ONNXRuntimeBackend, context: BuildContext) -> None:
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(backend(x), context.module(x), rtol=1e-4, atol=1e-5)


def test_candidates_with_different_provider_settings_share_one_export(
    mlp_context: BuildContext, tmp_path: Path, exports: list[Path]
) -> None:
    first = _in_build_folder(mlp_context, tmp_path, "a")
    second = _in_build_folder(mlp_context, tmp_path, "b")
    with capture() as events:
        one = ONNXRuntimeBackend(intra_op_num_threads=1, io_binding=False).build(first)
        two = ONNXRuntimeBackend(graph_optimization_level="basic", allow_spinning=False).build(second)
    assert len(exports) == 1
    (entry,) = _entries(tmp_path)
    assert "export_reused" not in one.build_info
    assert two.build_info["export_reused"] == str(entry)
    assert [event["path"] for event in events if event["event"] == "export reused"] == [str(entry)]
    # Each backend's model lies in its own folder, where checkpoints take it from.
    assert one.model_path == first.cache_dir / "model.onnx" and two.model_path == second.cache_dir / "model.onnx"
    assert one.model_path.read_bytes() == two.model_path.read_bytes()
    for backend, context in ((one, first), (two, second)):
        _check_matches_eager(backend, context)


def test_a_corrupt_entry_is_exported_again(mlp_context: BuildContext, tmp_path: Path, exports: list[Path]) -> None:
    ONNXRuntimeBackend().build(_in_build_folder(mlp_context, tmp_path, "a"))
    (entry,) = _entries(tmp_path)
    model = entry / "model.onnx"
    damaged = bytearray(model.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    model.unlink()  # a new file: the first build's hard link keeps the good bytes
    model.write_bytes(bytes(damaged))

    with capture() as events:
        backend = ONNXRuntimeBackend().build(_in_build_folder(mlp_context, tmp_path, "b"))
    assert len(exports) == 2
    assert "export_reused" not in backend.build_info
    (discarded,) = [event for event in events if event["event"].startswith("export cache entry discarded")]
    assert "sha256" in discarded["reason"]
    _check_matches_eager(backend, mlp_context)

    # The entry written in its place is whole and is reused.
    reused = ONNXRuntimeBackend().build(_in_build_folder(mlp_context, tmp_path, "c"))
    assert len(exports) == 2
    assert reused.build_info["export_reused"] == str(entry)


def test_an_unreadable_record_is_exported_again(mlp_context: BuildContext, tmp_path: Path, exports: list[Path]) -> None:
    ONNXRuntimeBackend().build(_in_build_folder(mlp_context, tmp_path, "a"))
    (entry,) = _entries(tmp_path)
    record = entry / export_cache.RECORD_FILE
    text = record.read_text()
    record.write_text(text[: len(text) // 2])  # a record cut short
    ONNXRuntimeBackend().build(_in_build_folder(mlp_context, tmp_path, "b"))
    assert len(exports) == 2
    assert json.loads(record.read_text())["files"]


KILLED_WRITER = """
import os, signal, sys, types
from pathlib import Path
from aitune_onnx import export_cache

def killed(path):  # the process is killed while it hashes what it staged
    os.kill(os.getpid(), signal.SIGKILL)

export_cache.file_sha256 = killed
export_cache._publish(Path(sys.argv[1]), types.SimpleNamespace(files=[Path(sys.argv[2])]))
"""


def test_what_a_killed_writer_left_half_written_is_removed_and_an_old_unnamed_one_kept(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    exports_root = cache / export_cache.EXPORTS
    model = tmp_path / "model.onnx"
    model.write_bytes(b"\0" * 1000)
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(exports_root / "somekey"), str(model)])
    assert writer.wait() == -signal.SIGKILL
    (staged,) = exports_root.iterdir()
    assert staged.name.startswith(f".somekey.{writer.pid}-")  # named after its writer
    assert (staged / "model.onnx").is_file() and not (exports_root / "somekey").exists()
    older = exports_root / ".otherkey.k3x9q0ab"  # an older aitune's staging folder: no pid in its name
    older.mkdir()

    environment = {**os.environ, "AITUNE_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "aitune_core.cli", "cache", "prune"]
    pruned = subprocess.run(command, env=environment, capture_output=True, text=True, check=True)
    assert not staged.exists(), pruned.stdout  # its writer is gone: garbage
    assert older.is_dir()  # its writer cannot be told: in use, as every folder without a pid
    assert f"its process (pid {writer.pid}) is gone" in pruned.stderr


def test_different_weights_get_their_own_entry(mlp_context: BuildContext, tmp_path: Path, exports: list[Path]) -> None:
    ONNXRuntimeBackend().build(_in_build_folder(mlp_context, tmp_path, "a"))
    changed = copy.deepcopy(mlp_context.module)
    with torch.no_grad():
        changed.up.weight[0, 0] += 1.0
    other = attrs.evolve(_in_build_folder(mlp_context, tmp_path, "b"), module=changed)
    backend = ONNXRuntimeBackend().build(other)
    assert len(exports) == 2
    assert len(_entries(tmp_path)) == 2
    _check_matches_eager(backend, other)


class Scaled(torch.nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.scale


def test_the_key_tells_apart_what_changes_the_export(mlp_context: BuildContext) -> None:
    """Same weights are not enough: attributes, modes, config and device change the exported model."""
    graph, samples, cpu = mlp_context.graph_spec, mlp_context.samples, torch.device("cpu")
    torch.manual_seed(0)
    base = Scaled(1.0).eval()
    twin = copy.deepcopy(base)

    def key(module: torch.nn.Module, config: ExportConfig | None = None, **changes: Any) -> str:
        arguments = {"file_name": "model.onnx", "variant": "", **changes}
        return export_key(module, graph, samples, config or ExportConfig(), cpu, **arguments)

    assert key(base) == key(twin)
    rescaled = copy.deepcopy(base)
    rescaled.scale = 2.0
    training = copy.deepcopy(base).train()
    distinct = {
        key(base),
        key(rescaled),
        key(training),
        key(base, ExportConfig(exporter="torchscript")),
        key(base, file_name="other.onnx"),
        key(base, variant="export_dtype=torch.float16"),
    }
    assert len(distinct) == 6
