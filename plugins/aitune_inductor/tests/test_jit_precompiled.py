"""``precompile=True``: a JIT checkpoint whose fresh process traces and compiles nothing.

Tuned in a process of its own and loaded in fresh processes with empty Inductor caches,
as in test_jit_compile_cache.py; each load reports torch's own counters. Trusted, Dynamo
traces no frame and Inductor neither generates nor looks up a graph: the saved functions
and their kernel libraries serve. Untrusted, the backend compiles as a JIT backend does.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from fresh_process import run_fresh

import aitune_core as ait
from aitune_core.plugin_api import Locator
from aitune_core.testing.engine import sha256_of
from aitune_inductor import precompiled
from aitune_inductor.precompiled import (
    PRECOMPILED_ARTIFACT,
    PrecompiledGraphs,
    PrecompiledIncompatible,
    PrecompileError,
    dense_copy,
)

_MODEL = "torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()"

_TUNE = f"""
import json, sys, torch
from pathlib import Path
import aitune_core as ait
from aitune_core.testing.timing import FAST_PROFILE
from aitune_inductor import TorchInductorJitBackend

torch.manual_seed(0)
model = {_MODEL}
before = {{name: tensor.clone() for name, tensor in model.state_dict().items()}}
folder = Path(sys.argv[1])
ait.config.cache_dir = folder / "cache"
module = ait.Module(model, "mlp")
strategy = ait.FirstWinsStrategy([TorchInductorJitBackend(precompile=True)], profile=FAST_PROFILE)
strategy.enable_performance_validation(False)
ait.tune(module, [torch.randn(6) for _ in range(4)], batch_sizes=[1, 4], strategy=strategy)
path = ait.save(module, folder / "ckpt")
x = torch.randn(3, 6)
with torch.no_grad():
    y = module(x)
torch.save({{"x": x, "y": y}}, folder / "call.pt")
untouched = all(torch.equal(t, before[n]) for n, t in model.state_dict().items()) and not model.training
print(json.dumps({{"path": str(path), "untouched": untouched}}))
"""

_LOAD = f"""
import json, sys, torch
import aitune_core as ait
from torch._dynamo.utils import counters
from torch._inductor import cpp_builder

builds = []
build = cpp_builder.CppBuilder.build
# Every run of the C++ compiler, by what it writes.
cpp_builder.CppBuilder.build = lambda self: builds.append(self.get_target_file_path()) or build(self)

torch.manual_seed(0)
model = {_MODEL}
path, trust, call = sys.argv[1], sys.argv[2] == "trust", torch.load(sys.argv[3])
loaded = ait.load(model, path, trust_native_code=trust)
with torch.no_grad():
    answer = loaded(call["x"])
torch.testing.assert_close(answer, call["y"], rtol=1e-5, atol=1e-5)
first = {{kind: dict(found) for kind, found in counters.items()}}
first["cpp_builds"] = len([target for target in builds if target.endswith(".so")])  # not header preprocessing
if len(sys.argv) > 4:  # a layout the build never saw: a transposed view
    strided = call["x"].t().contiguous().t()
    with torch.no_grad():
        torch.testing.assert_close(loaded(strided), call["y"], rtol=1e-5, atol=1e-5)
print(json.dumps(first))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("jit-precompiled")
    line, _ = run_fresh(_TUNE, [str(folder)], folder / "inductor")
    result = json.loads(line)
    assert result["untouched"], "tuning with precompile=True changed the model's weights or mode"
    return Path(result["path"])


def _backend(path: Path) -> dict[str, Any]:
    backend: dict[str, Any] = json.loads((path / "manifest.json").read_text())["modules"][0]["graphs"][0]["backend"]
    return backend


def _load_in_fresh_process(path: Path, trust: bool, scratch: Path, *extra: str) -> tuple[dict[str, Any], str]:
    arguments = [str(path), "trust" if trust else "-", str(path.parent / "call.pt"), *extra]
    line, log = run_fresh(_LOAD, arguments, scratch / f"inductor-{'trusted' if trust else 'untrusted'}")
    return json.loads(line), log


def test_the_precompiled_graphs_are_a_sealed_native_artifact_with_their_kernels(saved: Path) -> None:
    backend = _backend(saved)
    assert backend["config"]["precompile"] is True
    ref = backend["artifacts"][PRECOMPILED_ARTIFACT]
    assert ref["native"] is True
    assert ref["sha256"] == sha256_of(saved / ref["path"]) == backend["extra"]["precompiled_sha256"]
    with zipfile.ZipFile(saved / ref["path"]) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        names = set(archive.namelist())
    assert manifest["functions"] and set(manifest["functions"]) <= names
    kernels = [name for name in manifest["kernels"] if name.endswith(".main.so")]
    assert kernels, "a CPU graph compiles C++ kernels, which the artifact must carry"
    assert {f"kernels/{name}" for name in manifest["kernels"]} <= names


@pytest.mark.slow
def test_trusted_a_fresh_process_traces_and_compiles_nothing(saved: Path, tmp_path: Path) -> None:
    found, log = _load_in_fresh_process(saved, True, tmp_path)
    assert found.get("frames", {}).get("ok", 0) == 0, found  # Dynamo traced no frame
    inductor = found.get("inductor", {})
    assert inductor.get("fxgraph_cache_miss", 0) == 0 and inductor.get("fxgraph_cache_hit", 0) == 0, found
    assert found["cpp_builds"] == 0, "the C++ compiler ran: the kernels or the CPU probes were not carried"
    assert "precompiled graphs loaded" in log


@pytest.mark.slow
def test_untrusted_the_graphs_are_left_unread_and_the_module_compiles(saved: Path, tmp_path: Path) -> None:
    found, log = _load_in_fresh_process(saved, False, tmp_path)
    assert found.get("frames", {}).get("ok", 0) > 0 and found["cpp_builds"] > 0, found
    assert "precompiled graphs not loaded" in log and "trust_native_code=True" in log


@pytest.mark.slow
def test_a_call_no_saved_guard_accepts_is_compiled_and_says_why(saved: Path, tmp_path: Path) -> None:
    _, log = _load_in_fresh_process(saved, True, tmp_path, "strided")
    assert "no precompiled graph accepts this call" in log and "stride mismatch" in log


def test_precompiled_graphs_changed_after_saving_are_refused(saved: Path, tmp_path: Path) -> None:
    # The manifest's hash made to match: the backend's own record of the bytes still refuses them.
    path = tmp_path / "tampered"
    shutil.copytree(saved, path)
    manifest = json.loads((path / "manifest.json").read_text())
    ref = manifest["modules"][0]["graphs"][0]["backend"]["artifacts"][PRECOMPILED_ARTIFACT]
    artifact = path / ref["path"]
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0xFF
    artifact.write_bytes(bytes(data))
    ref["sha256"] = sha256_of(artifact)
    (path / "manifest.json").write_text(json.dumps(manifest))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ait.CheckpointError, match="precompiled graphs"):
        ait.load(model, path, trust_native_code=True)
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())


# ---------------------------------------------------------------------- without compiling


def _archive(manifest: dict[str, Any], members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("manifest.json", json.dumps(manifest))
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"kernels": ["../../../home/evil.main.so"]}, "a kernel library has a name Inductor never gives"),
        ({"kernels": ["cabcdefghijklmnopqrstuvwxyz.main.so/.."]}, "a kernel library has a name Inductor never gives"),
        ({"modules": {"os_system": "os"}}, "module names are not Dynamo's"),
        ({"format": 99}, "unknown manifest format 99"),
        ({"functions": "functions/0.bin"}, "functions are not a list"),
    ],
)
def test_a_hostile_manifest_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], refusal: str
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    manifest = {"format": 1, "functions": [], "kernels": [], "modules": {}, **change}
    data = _archive(manifest, {"kernels/x": b"\x7fELF"})
    path = tmp_path / "graphs.zip"
    path.write_bytes(data)
    graphs = PrecompiledGraphs(torch.nn.Linear(2, 2), fallback=lambda: torch.nn.Identity())
    with pytest.raises(PrecompileError, match=refusal):
        graphs.read(path, sha256_of(path), "test", torch.device("cpu"))
    assert not (tmp_path / "inductor").exists() or not any((tmp_path / "inductor").rglob("*.so"))
    assert not (tmp_path.parent.parent / "home" / "evil.main.so").exists()


def test_saved_functions_this_process_cannot_load_are_told_apart_from_changed_bytes(tmp_path: Path) -> None:
    # Checked to be what was saved, but not loadable here (another torch): the backend compiles instead.
    data = _archive(
        {"format": 1, "functions": ["functions/0.bin"], "kernels": [], "modules": {}},
        {"functions/0.bin": b"not a function torch saved"},
    )
    path = tmp_path / "graphs.zip"
    path.write_bytes(data)
    graphs = PrecompiledGraphs(torch.nn.Linear(2, 2), fallback=lambda: torch.nn.Identity())
    with pytest.raises(PrecompiledIncompatible, match="a saved function does not load here"):
        graphs.read(path, sha256_of(path), "test", torch.device("cpu"))


@pytest.mark.slow
def test_a_checkpoint_whose_functions_do_not_load_here_compiles_and_says_why(saved: Path, tmp_path: Path) -> None:
    # The backend's own record rewritten with the manifest's: bytes as saved, but not torch's.
    path = tmp_path / "other-torch"
    shutil.copytree(saved, path)
    shutil.copy(saved.parent / "call.pt", tmp_path / "call.pt")
    manifest = json.loads((path / "manifest.json").read_text())
    backend = manifest["modules"][0]["graphs"][0]["backend"]
    artifact = path / backend["artifacts"][PRECOMPILED_ARTIFACT]["path"]
    artifact.write_bytes(
        _archive(
            {"format": 1, "functions": ["functions/0.bin"], "kernels": [], "modules": {}},
            {"functions/0.bin": b"saved by another torch"},
        )
    )
    backend["artifacts"][PRECOMPILED_ARTIFACT]["sha256"] = sha256_of(artifact)
    backend["artifacts"][PRECOMPILED_ARTIFACT]["size"] = artifact.stat().st_size
    backend["extra"]["precompiled_sha256"] = sha256_of(artifact)
    (path / "manifest.json").write_text(json.dumps(manifest))
    found, log = _load_in_fresh_process(path, True, tmp_path)
    assert found.get("frames", {}).get("ok", 0) > 0, found
    assert "precompiled graphs not loaded" in log and "does not load here" in log


def test_bytes_that_differ_from_the_recorded_hash_are_never_opened(tmp_path: Path) -> None:
    path = tmp_path / "graphs.zip"
    path.write_bytes(b"not what was saved")
    graphs = PrecompiledGraphs(torch.nn.Linear(2, 2), fallback=lambda: torch.nn.Identity())
    with pytest.raises(PrecompileError, match="changed after it was saved"):
        graphs.read(path, "0" * 64, "test", torch.device("cpu"))


def _entry(guard_type: str, derived: tuple[str, ...] = (), is_global: bool = False) -> SimpleNamespace:
    return SimpleNamespace(guard_type=guard_type, derived_guard_types=derived, is_global=is_global, value=None)


@pytest.mark.skipif(not precompiled.available(), reason="this torch cannot save compiled functions")
def test_only_guards_that_mean_the_same_in_another_process_are_kept() -> None:
    entries = [
        _entry("TENSOR_MATCH"),
        _entry("SHAPE_ENV"),
        _entry("GLOBAL_STATE"),
        _entry("CONSTANT_MATCH"),  # a local constant argument's value
        _entry("CONSTANT_MATCH", ("ID_MATCH",)),  # a constant None: checked by identity, which torch cannot save
        _entry("TENSOR_MATCH", is_global=True),
        _entry("ID_MATCH"),
        _entry("CLOSURE_MATCH"),
        _entry("TYPE_MATCH"),
    ]
    assert precompiled.portable_guards(entries) == [True, True, True, True, False, False, False, False, False]


def test_outputs_come_back_contiguous_and_untouched_when_they_already_are() -> None:
    strided = torch.arange(12.0).reshape(3, 4).t()
    dense = torch.ones(2, 2)
    rebuilt, changed = dense_copy((strided, {"other": dense}), Locator("output"))
    assert changed and rebuilt[0].is_contiguous() and torch.equal(rebuilt[0], strided)
    assert rebuilt[1]["other"] is dense
    outputs = (dense, [dense])
    same, changed = dense_copy(outputs, Locator("output"))
    assert same is outputs and not changed


class _Saved:
    """Stands in for one of torch's saved functions: accepts every call and returns a strided view."""

    def guard_check(self, *_args: Any, **_kwargs: Any) -> bool:
        return True

    def fn(self, _module: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.t(), x


def test_a_precompiled_call_returns_contiguous_outputs() -> None:
    graphs = PrecompiledGraphs(torch.nn.Identity(), fallback=lambda: torch.nn.Identity())
    graphs.functions = [_Saved()]
    x = torch.arange(6.0).reshape(2, 3)
    strided, same = graphs(x)
    assert strided.is_contiguous() and torch.equal(strided, x.t()) and same is x


def test_the_build_also_compiles_for_the_dense_layout_of_strided_calls() -> None:
    from aitune_inductor.precompiled_lifecycle import _with_dense_layouts

    strided = {"x": torch.arange(6.0).reshape(2, 3).t()}
    dense = {"x": torch.ones(3, 2)}
    calls = list(_with_dense_layouts([("sample 0", strided), ("sample 1", dense)]))
    assert [call["x"].is_contiguous() for call in calls] == [False, True, True]
    assert torch.equal(calls[1]["x"], strided["x"]) and calls[2] is dense
