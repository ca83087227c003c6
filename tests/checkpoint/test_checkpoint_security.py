"""A checkpoint is data: signed or not, hostile or damaged, loading never runs it and a failed load changes nothing."""

from __future__ import annotations

import gc
import importlib
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.checkpoint.files import sha256_of
from aitune_core.checkpoint.load import load
from aitune_core.checkpoint.save import save
from aitune_core.config import config
from aitune_core.errors import CheckpointError
from aitune_core.module.wrapper import MODULE_REGISTRY, Module
from aitune_core.testing.checkpoint_fuzz import Canaries, fuzz_manifest
from aitune_core.testing.load_guard import assert_unchanged, fingerprint
from aitune_core.testing.timing import FAST_PROFILE

load_module = importlib.import_module("aitune_core.checkpoint.load")
KEY = "a signing key of more than sixteen bytes"


class Encoder(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.up = nn.Linear(8, width)
        self.drop = nn.Dropout(0.5)
        self.norm = nn.BatchNorm1d(width)
        self.down = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.drop(torch.relu(self.norm(self.up(x)))))


class Pipeline(nn.Module):
    def __init__(self, width: int = 16, head: int = 2) -> None:
        super().__init__()
        self.encoder = Encoder(width)
        self.head = nn.Linear(4, head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path) -> None:
    config.cache_dir = tmp_path / "cache"


@pytest.fixture
def checkpoint(tmp_path: Path, unique_name: Callable[[str], str]) -> tuple[Path, str, torch.Tensor, torch.Tensor]:
    """``(path, module name, x, encoder(x))`` of a saved, signed eager checkpoint; the tuned model is gone."""
    model = Pipeline().eval()
    name = unique_name("encoder")
    model.encoder = ait.Module(model.encoder, name)
    ait.tune(
        model,
        [torch.randn(8) for _ in range(4)],
        batch_sizes=[1, 2, 4],
        strategy=ait.FirstWinsStrategy([ait.TorchEagerBackend()], profile=FAST_PROFILE),
    )
    path = save(model, tmp_path / "ckpt", sign_key=KEY)
    x = torch.randn(3, 8)
    with torch.no_grad():
        y = model.encoder(x)
    del model
    return path, name, x, y


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


# --------------------------------------------------------------------------- signing
def test_a_signed_checkpoint_loads_with_its_key(checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor]) -> None:
    path, _, x, y = checkpoint
    model = load(Pipeline().eval(), path, verify_key=KEY)
    torch.testing.assert_close(model.encoder(x), y, rtol=0, atol=0)


@pytest.mark.parametrize(
    "tamper",
    ["description", "hash_and_file", "other_key", "unsigned"],
)
def test_verify_key_refuses_what_was_not_signed_as_it_is(
    checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor], tamper: str
) -> None:
    path, _, _, _ = checkpoint
    key = KEY
    if tamper == "description":
        _edit(path, lambda m: m["modules"][0]["graphs"][0]["backend"].update(description="harmless?"))
    elif tamper == "hash_and_file":
        weights = path / "modules/0/weights.pt"
        state = torch.load(weights, weights_only=True)
        state = {name: tensor + 1 for name, tensor in state.items()}
        torch.save(state, weights)
        _edit(path, lambda m: m["modules"][0]["weights"].update(sha256=sha256_of(weights), size=weights.stat().st_size))
    elif tamper == "other_key":
        key = "another key, also long enough"
    else:
        (path / "signature.json").unlink()
    model = Pipeline().eval()
    before = fingerprint(model)
    with pytest.raises(CheckpointError, match=r"signature|not signed"):
        load(model, path, verify_key=key)
    assert_unchanged(before, fingerprint(model))


def test_short_keys_are_refused(checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor]) -> None:
    with pytest.raises(ValueError, match="at least 16"):
        load(Pipeline().eval(), checkpoint[0], verify_key="short")


# --------------------------------------------------------------------------- all or nothing
def _swap_samples_for_pickle(path: Path) -> None:
    samples = next(path.rglob("samples.pt"))

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (print, ("payload ran",))

    torch.save({"0": Payload()}, samples)
    _edit(
        path,
        lambda m: m["modules"][0]["graphs"][0]["samples"].update(
            sha256=sha256_of(samples), size=samples.stat().st_size
        ),
    )


CHECK_FAILURES: dict[str, tuple[Callable[[Path], None], Callable[[], nn.Module], str]] = {
    "pickle samples": (_swap_samples_for_pickle, lambda: Pipeline().eval(), "not plain tensor data"),
    "wrong width": (lambda path: None, lambda: Pipeline(width=32).eval(), "do not fit this model"),
    "missing backend": (
        lambda path: _edit(path, lambda m: m["modules"][0]["graphs"][0]["backend"].update(name="made_up")),
        lambda: Pipeline().eval(),
        "not installed",
    ),
    "bad config": (
        lambda path: _edit(
            path, lambda m: m["modules"][0]["graphs"][0]["backend"]["config"].update(autocast_enabled="yes")
        ),
        lambda: Pipeline().eval(),
        "autocast_enabled",
    ),
    "impostor distribution": (
        lambda path: _edit(path, lambda m: m["modules"][0]["graphs"][0]["backend"].update(distribution="aitune-evil")),
        lambda: Pipeline().eval(),
        "registered by aitune-core",
    ),
    "bad graph key": (
        lambda path: _edit(path, lambda m: m["modules"][0]["graphs"][0]["spec"].update(key=[["T", 7]])),
        lambda: Pipeline().eval(),
        "graph",
    ),
    "empty": (lambda path: _edit(path, lambda m: m.update(modules=[])), lambda: Pipeline().eval(), "no modules"),
}


@pytest.mark.parametrize("failure", sorted(CHECK_FAILURES))
def test_a_refused_checkpoint_leaves_the_model_as_it_was(
    checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor], failure: str, capfd: pytest.CaptureFixture[str]
) -> None:
    path, name, _, _ = checkpoint
    damage, build, message = CHECK_FAILURES[failure]
    damage(path)
    model = build()
    model.encoder.train()  # a mode load must not touch either
    before = fingerprint(model)
    with pytest.raises(CheckpointError, match=message) as raised:
        load(model, path)
    assert_unchanged(before, fingerprint(model))
    assert name not in MODULE_REGISTRY.modules
    assert "payload ran" not in capfd.readouterr().out
    if failure not in ("empty", "wrong width", "pickle samples"):
        assert f"module `{name}`" in str(raised.value)


APPLY_STEPS = {
    "load_state_dict": (nn.Module, "load_state_dict"),
    "to": (nn.Module, "to"),
    "add_graph": (Module, "add_graph"),
    "deploy": (ait.TorchEagerBackend, "deploy"),
    "set_routes": (Module, "set_routes"),
    "swap": (load_module, "Route"),
}


@pytest.mark.parametrize("step", sorted(APPLY_STEPS))
def test_a_load_failing_at_any_step_of_applying_puts_everything_back(
    checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor], step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, name, x, y = checkpoint
    owner, attribute = APPLY_STEPS[step]
    original = getattr(owner, attribute)
    calls = {"n": 0}

    def fail_after_running(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        original(*args, **kwargs)  # the step happens, then the load dies
        raise RuntimeError(f"injected failure after {step}")

    monkeypatch.setattr(owner, attribute, fail_after_running)
    model = Pipeline().eval()
    before = fingerprint(model)
    with pytest.raises((RuntimeError, CheckpointError), match="injected failure"):
        load(model, path)
    assert calls["n"] >= 1
    assert_unchanged(before, fingerprint(model))
    assert name not in MODULE_REGISTRY.modules
    monkeypatch.setattr(owner, attribute, original)
    # Nothing is left half-registered: the same model loads now.
    restored = load(model, path)
    torch.testing.assert_close(restored.encoder(x), y, rtol=0, atol=0)


def test_loading_into_an_existing_wrapper_that_fails_keeps_its_routes(
    checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _, x, y = checkpoint
    model = load(Pipeline().eval(), path)
    routes = dict(model.encoder.routes)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected failure in deploy")

    monkeypatch.setattr(ait.TorchEagerBackend, "deploy", broken)
    with pytest.raises(CheckpointError, match="injected failure"):
        load(model, path)
    assert model.encoder.routes == routes
    torch.testing.assert_close(model.encoder(x), y, rtol=0, atol=0)


# --------------------------------------------------------------------------- what a load may touch
def test_native_code_marked_in_the_manifest_is_refused_without_trust(
    checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor],
) -> None:
    path, _, x, y = checkpoint
    library = path / "modules/0/graphs/lib.so"
    library.write_bytes(b"\x7fELF pretend")

    def add_native(manifest: dict[str, Any]) -> None:
        ref = {"path": "modules/0/graphs/lib.so", "sha256": sha256_of(library), "size": 12, "native": True}
        manifest["modules"][0]["graphs"][0]["backend"]["artifacts"]["library"] = ref

    _edit(path, add_native)
    model = Pipeline().eval()
    with pytest.raises(CheckpointError, match=r"native code.*library.*trust_native_code=True"):
        load(model, path)
    restored = load(model, path, trust_native_code=True)
    torch.testing.assert_close(restored.encoder(x), y, rtol=0, atol=0)


def test_a_load_writes_only_into_a_fresh_private_folder(
    checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor], tmp_path: Path
) -> None:
    path, _, x, y = checkpoint
    loaded = load(Pipeline().eval(), path)
    archive = save(loaded, tmp_path / "ckpt.zip", archive=True)
    del loaded
    gc.collect()
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if "cache" not in p.parts}
    for _ in range(2):
        model = load(Pipeline().eval(), archive)
        torch.testing.assert_close(model.encoder(x), y, rtol=0, atol=0)
        del model
        gc.collect()
    after = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if "cache" not in p.parts}
    assert before == after
    folders = sorted((config.cache_dir / "loaded").iterdir())
    assert all(folder.stat().st_mode & 0o777 == 0o700 for folder in folders)


@pytest.mark.parametrize("member", ["../escaped.txt", "/abs.txt", "dup", "link", "bomb"])
def test_hostile_archives_are_refused_before_anything_is_written(tmp_path: Path, member: str) -> None:
    canaries = Canaries.make(tmp_path / "canaries")
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("manifest.json", "{}")
        if member == "dup":
            bundle.writestr("a.txt", "1")
            bundle.writestr("a.txt", "2")
        elif member == "link":
            info = zipfile.ZipInfo("link")
            info.external_attr = 0o120777 << 16
            bundle.writestr(info, str(canaries.file))
        elif member == "bomb":
            bundle.writestr(zipfile.ZipInfo("bomb.bin"), b"\0" * (1 << 22), compress_type=zipfile.ZIP_DEFLATED)
        else:
            bundle.writestr(member, "x")
    with pytest.raises(CheckpointError, match="refusing"):
        load(Pipeline().eval(), archive)
    canaries.assert_untouched()
    assert not (tmp_path / "escaped.txt").exists()
    assert list((config.cache_dir / "loaded").iterdir()) == []


def test_fuzzed_manifests_are_refused_or_load_harmlessly(
    checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor], tmp_path: Path
) -> None:
    path, _, x, y = checkpoint
    canaries = Canaries.make(tmp_path / "canaries")
    model = Pipeline().eval()
    before = fingerprint(model)
    report = fuzz_manifest(model, path, canaries)
    assert report.unexpected == []
    assert report.cases > 500 and report.refused > report.cases // 2
    assert_unchanged(before, fingerprint(model))
    canaries.assert_untouched()
    # Every field that took a hostile value loads for real, and the answers do not change.
    for field, data in report.accepted.items():
        copy = tmp_path / f"accepted-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(path, copy)
        (copy / "manifest.json").write_bytes(data)
        (copy / "signature.json").unlink()
        restored = load(Pipeline().eval(), copy)
        module = restored.encoder
        assert isinstance(module, Module), field
        torch.testing.assert_close(module(x), y, rtol=0, atol=0, msg=field)
        del restored, module
    canaries.assert_untouched()
    assert "modules[].graphs[].backend.name" not in report.accepted
    assert "modules[].weights.path" not in report.accepted


# --------------------------------------------------------------------------- aitune inspect
def _inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aitune_core.cli", "inspect", *args], capture_output=True, text=True, timeout=120
    )


def _error_lines(result: subprocess.CompletedProcess[str]) -> int:
    """aitune's own error lines (torch may print warnings of its own on stderr)."""
    return sum(line.startswith("aitune inspect:") for line in result.stderr.splitlines())


@pytest.mark.slow  # child processes and their limits
def test_inspect_checks_hashes_and_reports_damage_in_one_line(
    checkpoint: tuple[Path, str, torch.Tensor, torch.Tensor],
) -> None:
    path = checkpoint[0]
    fine = _inspect(str(path))
    assert fine.returncode == 0, fine.stderr
    assert "every file's sha256 checked" in fine.stdout
    assert "signed: yes" in fine.stdout and "native code: none" in fine.stdout
    weights = path / "modules/0/weights.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    tampered = _inspect(str(path))
    assert tampered.returncode == 1
    assert _error_lines(tampered) == 1 and "was modified" in tampered.stderr
    assert _inspect("--no-verify", str(path)).returncode == 0
    _edit(path, lambda m: m["modules"][0]["graphs"][0]["spec"].update(key={"not": "a key"}))
    malformed = _inspect("--no-verify", str(path))
    assert malformed.returncode == 1 and _error_lines(malformed) == 1, malformed.stderr
    assert "Traceback" not in malformed.stderr
    _edit(path, lambda m: m.update(modules=[]))
    empty = _inspect("--no-verify", str(path))
    assert empty.returncode == 1 and "no modules" in empty.stderr
