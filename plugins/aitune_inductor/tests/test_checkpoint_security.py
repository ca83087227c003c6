"""Inductor checkpoints are data: hostile configs, packages and manifests are refused, native code needs trust."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.checkpoint_fuzz import (
    Canaries,
    TunedCheckpoint,
    assert_tuned_checkpoint_survives_fuzzing,
    tune_and_save,
)
from aitune_core.testing.engine import sha256_of
from aitune_inductor import TorchInductorAotBackend, TorchInductorJitBackend


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3)).eval()


@pytest.fixture(scope="module")
def jit_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> TunedCheckpoint:
    return tune_and_save(build_model, 6, TorchInductorJitBackend(), tmp_path_factory.mktemp("jit"), "security-jit")


@pytest.fixture(scope="module")
def aot_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> TunedCheckpoint:
    return tune_and_save(build_model, 6, TorchInductorAotBackend(), tmp_path_factory.mktemp("aot"), "security-aot")


@pytest.fixture(scope="module")
def eager_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> TunedCheckpoint:
    return tune_and_save(build_model, 6, ait.TorchEagerBackend(), tmp_path_factory.mktemp("eager"), "security-eager")


@pytest.fixture
def copy_of(tmp_path: Path) -> Iterator[Callable[[TunedCheckpoint], Path]]:
    def make(saved: TunedCheckpoint) -> Path:
        target = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(saved.path, target)
        return target

    yield make


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def _backend(manifest: dict[str, Any]) -> dict[str, Any]:
    backend: dict[str, Any] = manifest["modules"][0]["graphs"][0]["backend"]
    return backend


def _payloads(canaries: Canaries) -> list[dict[str, Any]]:
    script = canaries.folder / "pwned.sh"
    return [
        {"cpp.enable_floating_point_contract_flag": f"off -wrapper 'sh,-c,touch {canaries.folder}/pwned; cc \"$@\"'"},
        {"cpp.cxx": str(script)},
    ]


# --------------------------------------------------------------------------- attack 1: options run a compiler flag
@pytest.mark.parametrize("payload", [0, 1])
@pytest.mark.parametrize("source", ["jit", "eager"])
def test_compiler_options_in_a_manifest_never_reach_the_compiler(
    request: pytest.FixtureRequest,
    copy_of: Callable[[TunedCheckpoint], Path],
    tmp_path: Path,
    payload: int,
    source: str,
) -> None:
    saved: TunedCheckpoint = request.getfixturevalue(f"{source}_checkpoint")
    canaries = Canaries.make(tmp_path / "canaries")
    options = _payloads(canaries)[payload]
    path = copy_of(saved)

    def attack(manifest: dict[str, Any]) -> None:
        backend = _backend(manifest)
        backend.update(name="inductor_jit", distribution="aitune-inductor", is_jit=True)
        backend["config"] = {"options": options}

    _edit(path, attack)
    model = build_model()
    with pytest.raises(ait.CheckpointError, match=f"options\\['{next(iter(options))}'\\]"):
        ait.load(model, path)
    canaries.assert_untouched()
    assert not (Path.cwd() / "PWNED").exists()


# --------------------------------------------------------------------------- attack 3: package members escape
def test_a_package_member_that_leaves_its_folder_is_refused(
    aot_checkpoint: TunedCheckpoint, copy_of: Callable[[TunedCheckpoint], Path], tmp_path: Path
) -> None:
    path = copy_of(aot_checkpoint)
    canaries = Canaries.make(tmp_path / "canaries")
    (package,) = path.rglob("*.pt2")
    depth = len(package.relative_to("/").parts) + 2
    escape = "../" * depth + str(canaries.folder.relative_to("/")) + "/pwned.so"
    with zipfile.ZipFile(package, "a") as bundle:
        bundle.writestr(escape, b"\x7fELF not really")
    relative = package.relative_to(path).as_posix()

    def rehash(manifest: dict[str, Any]) -> None:
        for ref in _backend(manifest)["artifacts"].values():
            if ref["path"] == relative:
                ref.update(sha256=sha256_of(package), size=package.stat().st_size)

    _edit(path, rehash)
    model = build_model()
    with pytest.raises(ait.CheckpointError, match=r"pwned\.so"):
        ait.load(model, path, trust_native_code=True)
    canaries.assert_untouched()


# --------------------------------------------------------------------------- native code
def test_an_aot_checkpoint_is_native_code_and_needs_trust(
    aot_checkpoint: TunedCheckpoint, copy_of: Callable[[TunedCheckpoint], Path]
) -> None:
    manifest = json.loads((aot_checkpoint.path / "manifest.json").read_text())
    assert [ref["native"] for ref in _backend(manifest)["artifacts"].values()] == [True]
    with pytest.raises(ait.CheckpointError, match=r"native code.*inductor_aot package.*trust_native_code=True"):
        ait.load(build_model(), aot_checkpoint.path)
    # Unmarking it in the manifest hides nothing: the installed class says what is native.
    path = copy_of(aot_checkpoint)
    _edit(path, lambda m: [ref.update(native=False) for ref in _backend(m)["artifacts"].values()])
    with pytest.raises(ait.CheckpointError, match="native code"):
        ait.load(build_model(), path)
    loaded = ait.load(build_model(), aot_checkpoint.path, trust_native_code=True)
    torch.testing.assert_close(loaded(aot_checkpoint.x), aot_checkpoint.y, rtol=0, atol=0)
    shown = subprocess.run(
        [sys.executable, "-m", "aitune_core.cli", "inspect", str(aot_checkpoint.path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "loading runs these (needs trust_native_code=True)" in shown.stdout
    assert "inductor_aot package" in shown.stdout


# --------------------------------------------------------------------------- fuzz
@pytest.mark.parametrize("source", ["jit", "aot"])
def test_fuzzed_inductor_manifests_are_refused_or_load_harmlessly(
    request: pytest.FixtureRequest, tmp_path: Path, source: str
) -> None:
    saved: TunedCheckpoint = request.getfixturevalue(f"{source}_checkpoint")
    assert_tuned_checkpoint_survives_fuzzing(build_model, saved, tmp_path, rtol=1e-5, atol=1e-5)
