"""A JIT checkpoint carries its compile cache: trusted, a fresh process serves without compiling.

The checkpoint is tuned in a process of its own, as a tuning script is: a pytest process
that compiled the same forward in earlier tests carries Dynamo's state from them (shapes
seen, dims made dynamic) into the build, which would then compile a graph that a new
process does not. Each load runs in a fresh process with an empty Inductor cache, as a
deployment does, and reports torch's own compile counters: whether Inductor found the
graph in its cache (loaded from the checkpoint) or generated it again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from fresh_process import run_fresh

import aitune_core as ait
from aitune_core.testing.checkpoint_fuzz import TunedCheckpoint
from aitune_core.testing.engine import sha256_of
from aitune_inductor.compile_cache import COMPILE_CACHE_ARTIFACT, available

pytestmark = pytest.mark.skipif(not available(), reason="this torch cannot save compile caches")

_LOAD = """
import json, sys, torch
import aitune_core as ait
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()
path, trust, call = sys.argv[1], sys.argv[2] == "trust", torch.load(sys.argv[3])
loaded = ait.load(model, path, trust_native_code=trust)
with torch.no_grad():
    answer = loaded(call["x"])
torch.testing.assert_close(answer, call["y"], rtol=1e-5, atol=1e-5)
print(json.dumps({kind: dict(found) for kind, found in counters.items()}))
"""


_TUNE = """
import sys, torch
from pathlib import Path
from aitune_core.testing.checkpoint_fuzz import tune_and_save
from aitune_inductor import TorchInductorJitBackend

def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()

folder = Path(sys.argv[1])
checkpoint = tune_and_save(build_model, 6, TorchInductorJitBackend(), folder, "compile-cache")
torch.save({"x": checkpoint.x, "y": checkpoint.y}, folder / "call.pt")
print(checkpoint.path)
"""


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> TunedCheckpoint:
    folder = tmp_path_factory.mktemp("jit-cache")
    line, _ = run_fresh(_TUNE, [str(folder)], folder / "inductor")
    call = torch.load(folder / "call.pt")
    return TunedCheckpoint(Path(line), call["x"], call["y"])


def _backend(path: Path) -> dict[str, Any]:
    manifest = json.loads((path / "manifest.json").read_text())
    backend: dict[str, Any] = manifest["modules"][0]["graphs"][0]["backend"]
    return backend


def _load_in_fresh_process(saved: TunedCheckpoint, trust: bool, scratch: Path) -> tuple[dict[str, Any], str]:
    """Load ``saved`` in a new process whose Inductor cache is a new, empty folder; its counters and log."""
    arguments = [str(saved.path), "trust" if trust else "-", str(saved.path.parent / "call.pt")]
    empty = scratch / f"inductor-{'trusted' if trust else 'untrusted'}"
    line, log = run_fresh(_LOAD, arguments, empty, AITUNE_CACHE_DIR=str(scratch))
    return json.loads(line), log


def test_the_compile_cache_is_a_sealed_native_artifact(saved: TunedCheckpoint) -> None:
    backend = _backend(saved.path)
    ref = backend["artifacts"][COMPILE_CACHE_ARTIFACT]
    assert ref["native"] is True and ref["size"] > 0
    assert ref["sha256"] == sha256_of(saved.path / ref["path"]) == backend["extra"]["compile_cache_sha256"]
    shown = subprocess.run(
        [sys.executable, "-m", "aitune_core.cli", "inspect", str(saved.path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "loading runs these (needs trust_native_code=True)" in text
    assert f"inductor_jit {COMPILE_CACHE_ARTIFACT}" in text
    assert "without trust_native_code=True they are not loaded, the graph compiles again" in text


@pytest.mark.slow
def test_trusted_a_fresh_process_serves_from_the_stored_kernels(saved: TunedCheckpoint, tmp_path: Path) -> None:
    found, log = _load_in_fresh_process(saved, trust=True, scratch=tmp_path)
    inductor, aot = found.get("inductor", {}), found.get("aot_autograd", {})
    assert inductor.get("fxgraph_cache_miss", 0) == 0 and aot.get("autograd_cache_miss", 0) == 0, found
    assert inductor.get("fxgraph_cache_hit", 0) + aot.get("autograd_cache_hit", 0) > 0, found
    assert "compile cache loaded" in log


@pytest.mark.slow
def test_untrusted_the_cache_is_left_unread_and_the_graph_compiles_again(
    saved: TunedCheckpoint, tmp_path: Path
) -> None:
    found, log = _load_in_fresh_process(saved, trust=False, scratch=tmp_path)
    assert found.get("inductor", {}).get("fxgraph_cache_miss", 0) > 0, found
    assert "compile cache not loaded" in log and "trust_native_code=True" in log


def _tampered(saved: TunedCheckpoint, tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "tampered"
    shutil.copytree(saved.path, path)
    artifact = path / _backend(path)["artifacts"][COMPILE_CACHE_ARTIFACT]["path"]
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0xFF
    artifact.write_bytes(bytes(data))
    return path, artifact


def test_a_tampered_compile_cache_is_refused(saved: TunedCheckpoint, tmp_path: Path) -> None:
    path, _ = _tampered(saved, tmp_path)
    with pytest.raises(ait.CheckpointError, match=COMPILE_CACHE_ARTIFACT):
        ait.load(build_model(), path, trust_native_code=True)


def test_a_compile_cache_whose_manifest_hash_was_rewritten_too_is_refused(
    saved: TunedCheckpoint, tmp_path: Path
) -> None:
    # The manifest's hash made to match: the backend's own record of its bytes still refuses them.
    path, artifact = _tampered(saved, tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    backend = manifest["modules"][0]["graphs"][0]["backend"]
    backend["artifacts"][COMPILE_CACHE_ARTIFACT]["sha256"] = sha256_of(artifact)
    (path / "manifest.json").write_text(json.dumps(manifest))
    model = build_model()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ait.CheckpointError, match="compile cache"):
        ait.load(model, path, trust_native_code=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name])


@pytest.mark.slow
def test_a_checkpoint_without_a_compile_cache_says_it_compiles_at_load(
    saved: TunedCheckpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As a checkpoint tuned with a torch that could not save compile caches would be.
    path = tmp_path / "without-cache"
    shutil.copytree(saved.path, path)
    manifest = json.loads((path / "manifest.json").read_text())
    backend = manifest["modules"][0]["graphs"][0]["backend"]
    (path / backend["artifacts"].pop(COMPILE_CACHE_ARTIFACT)["path"]).unlink()
    del backend["extra"]["compile_cache_sha256"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    loaded = ait.load(build_model(), path, trust_native_code=True)
    with torch.no_grad():
        torch.testing.assert_close(loaded(saved.x), saved.y, rtol=1e-5, atol=1e-5)
    log = capsys.readouterr().err
    assert "holds no compile cache" in log and "compiling at load" in log
