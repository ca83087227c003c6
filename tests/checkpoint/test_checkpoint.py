"""Checkpoints: round trips in fresh processes, and every way a checkpoint can be unsafe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.checkpoint.files import sha256_of
from aitune_core.checkpoint.load import load
from aitune_core.checkpoint.manifest import MIGRATIONS
from aitune_core.checkpoint.save import save
from aitune_core.errors import CheckpointError
from aitune_core.testing.timing import FAST_PROFILE

ROOT = Path(__file__).resolve().parents[2]


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Pipeline(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def tune_eager(func, batch_sizes=(1, 2, 4)) -> None:  # type: ignore[no-untyped-def]
    ait.tune(
        func,
        [torch.randn(8) for _ in range(4)],
        batch_sizes=list(batch_sizes),
        strategy=ait.FirstWinsStrategy([ait.TorchEagerBackend()], profile=FAST_PROFILE),
    )


@attrs.define
class Saved:
    """A saved checkpoint and what its encoder returned; the tuned model itself is gone."""

    path: Path
    name: str
    x: torch.Tensor
    y: torch.Tensor


@pytest.fixture
def saved(tmp_path: Path, unique_name) -> Saved:  # type: ignore[no-untyped-def]
    model = Pipeline().eval()
    name = unique_name("encoder")
    model.encoder = ait.Module(model.encoder, name)
    tune_eager(model)
    path = save(model, tmp_path / "ckpt")
    x = torch.randn(3, 8)
    return Saved(path, name, x, model.encoder(x))


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AITUNE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=300
    )


def test_round_trip_in_a_fresh_process_with_other_weights(tmp_path: Path, saved: Saved) -> None:
    path, name = saved.path, saved.name
    torch.save({"x": saved.x, "y": saved.y}, tmp_path / "expected.pt")
    result = run_python(
        f"""
        import torch, aitune_core as ait
        from aitune_core.checkpoint.load import load
        import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_checkpoint import Pipeline
        torch.manual_seed(123)
        model = load(Pipeline().eval(), {str(path)!r})
        expected = torch.load({str(tmp_path / "expected.pt")!r})
        assert type(model.encoder).__name__ == "Module", type(model.encoder)
        assert model.encoder.name == {name!r}
        assert model.encoder.state.name == "TUNED"
        assert model.encoder.backends["0"].state.name == "DEPLOYED"
        assert torch.equal(model.encoder(expected["x"]), expected["y"])
        print("ok")
    """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_top_level_module_and_several_modules(tmp_path: Path, unique_name) -> None:  # type: ignore[no-untyped-def]
    top = ait.Module(Encoder().eval(), unique_name("top"))
    tune_eager(top)
    save(top, tmp_path / "top")
    x = torch.randn(2, 8)
    expected = top(x)
    fresh = Encoder().eval()
    with pytest.raises(CheckpointError, match="already exists in this process"):
        load(fresh, tmp_path / "top")  # the tuned wrapper still holds its name in this process
    del top
    restored = load(fresh, tmp_path / "top")
    assert isinstance(restored, ait.Module) and restored.module is fresh
    torch.testing.assert_close(restored(x), expected, rtol=0, atol=0)
    del restored

    model = Pipeline().eval()
    names = unique_name("enc"), unique_name("head")
    model.encoder = ait.Module(model.encoder, names[0])
    model.head = ait.Module(model.head, names[1])
    tune_eager(model)
    save(model, tmp_path / "two")
    expected = model(x)
    del model
    fresh_model = Pipeline().eval()
    loaded = load(fresh_model, tmp_path / "two")
    assert loaded is fresh_model
    assert {loaded.encoder.name, loaded.head.name} == set(names)
    torch.testing.assert_close(loaded(x), expected, rtol=0, atol=0)


def test_archive_round_trip(tmp_path: Path, unique_name) -> None:  # type: ignore[no-untyped-def]
    top = ait.Module(Encoder().eval(), unique_name())
    tune_eager(top)
    archive = save(top, tmp_path / "model.aitune", archive=True)
    assert archive.is_file()
    x = torch.randn(4, 8)
    expected = top(x)
    del top
    restored = load(Encoder().eval(), archive)
    torch.testing.assert_close(restored(x), expected, rtol=0, atol=0)


def test_tampered_byte_is_refused_naming_the_file(saved: Saved) -> None:
    path = saved.path
    weights = path / "modules" / "0" / "weights.pt"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"modules/0/weights\.pt was modified"):
        load(Pipeline().eval(), path)


def test_pickle_payload_is_never_executed(saved: Saved, tmp_path: Path) -> None:
    path = saved.path
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    weights = path / "modules" / "0" / "weights.pt"
    torch.save({"up.weight": Payload()}, weights)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["modules"][0]["weights"]["sha256"] = sha256_of(weights)  # a crafted, consistent checkpoint
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="not plain tensor data"):
        load(Pipeline().eval(), path)
    assert not marker.exists()


def _edit_manifest(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_path_traversal_is_refused(saved: Saved) -> None:
    path = saved.path
    _edit_manifest(path, lambda m: m["modules"][0]["weights"].update(path="../../etc/passwd"))
    with pytest.raises(CheckpointError, match="outside the checkpoint"):
        load(Pipeline().eval(), path)


def test_too_new_format_is_refused(saved: Saved) -> None:
    path = saved.path
    _edit_manifest(path, lambda m: m.update(format_version=99))
    with pytest.raises(CheckpointError, match="format version 99, newer"):
        load(Pipeline().eval(), path)


def test_missing_artifact_is_refused(saved: Saved) -> None:
    path = saved.path
    (path / "modules" / "0" / "weights.pt").unlink()
    with pytest.raises(CheckpointError, match=r"weights\.pt is missing"):
        load(Pipeline().eval(), path)


def test_missing_plugin_names_the_distribution_to_install(saved: Saved) -> None:
    path = saved.path

    def edit(manifest):  # type: ignore[no-untyped-def]
        backend = manifest["modules"][0]["graphs"][0]["backend"]
        backend.update(name="made_up_backend", distribution="aitune-made-up", version="1.2.3")

    _edit_manifest(path, edit)
    with pytest.raises(CheckpointError, match=r"install aitune-made-up>=1\.2\.3"):
        load(Pipeline().eval(), path)


def test_old_format_is_migrated(saved: Saved) -> None:
    path = saved.path

    def to_v0(manifest):  # type: ignore[no-untyped-def]
        manifest["format_version"] = 0
        manifest["core_version"] = manifest.pop("aitune_core_version")

    _edit_manifest(path, to_v0)
    with pytest.raises(CheckpointError, match="no migration from checkpoint format version 0"):
        load(Pipeline().eval(), path)
    MIGRATIONS[0] = lambda m: {
        **{k: v for k, v in m.items() if k != "core_version"},
        "aitune_core_version": m["core_version"],
    }
    try:
        restored = load(Pipeline().eval(), path)
        torch.testing.assert_close(restored.encoder(saved.x), saved.y, rtol=0, atol=0)
    finally:
        del MIGRATIONS[0]


def test_saving_nothing_tuned_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="nothing to save"):
        save(Pipeline(), tmp_path / "empty")
    assert not (tmp_path / "empty").exists()


def test_a_killed_save_leaves_the_previous_checkpoint_intact(saved: Saved, tmp_path: Path) -> None:
    path = saved.path
    before = (path / "manifest.json").read_text()
    # A second save whose weights are large enough to be caught mid-write.
    script = f"""
        import torch, aitune_core as ait
        from torch import nn
        from aitune_core.checkpoint.save import save
        from aitune_core.profiling import ProfileConfig
        big = nn.Sequential(nn.Linear(4096, 4096), nn.Linear(4096, 4096), nn.Linear(4096, 8)).eval()
        m = ait.Module(big, "big")
        ait.tune(m, [torch.randn(4096) for _ in range(2)], batch_sizes=[1, 2],
                 strategy=ait.FirstWinsStrategy([ait.TorchEagerBackend()],
                                                profile=ProfileConfig(max_batch_search=False, max_time_s=0.01)))
        print("saving", flush=True)
        for _ in range(1000):
            save(m, {str(path)!r})
    """
    env = {**os.environ, "AITUNE_CACHE_DIR": str(tmp_path / "cache2"), "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "saving"
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".ckpt.saving-*")) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert list(tmp_path.glob(".ckpt.saving-*")), "the save never started"
        time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    leftovers = [p.name for p in tmp_path.glob(".ckpt.*")]
    assert leftovers, "the kill did not land inside a save"
    # Whatever the kill interrupted, a complete checkpoint is at `path`: the old one or a new one.
    manifest = json.loads((path / "manifest.json").read_text())
    if (path / "manifest.json").read_text() == before:
        torch.testing.assert_close(load(Pipeline().eval(), path).encoder(saved.x), saved.y, rtol=0, atol=0)
    else:
        assert manifest["modules"][0]["name"] == "big"
        for module in manifest["modules"]:
            assert (path / module["weights"]["path"]).is_file()


def test_release_weights_frees_them_only_where_backends_carry_their_own(saved: Saved) -> None:
    """Eager needs the original weights, so they stay; a module would only lose them with AOT backends."""
    restored = load(Pipeline().eval(), saved.path, release_weights=True)
    assert not any(p.is_meta for p in restored.encoder.parameters())
    torch.testing.assert_close(restored.encoder(saved.x), saved.y, rtol=0, atol=0)


def test_a_released_module_refuses_calls_it_was_not_tuned_for(tmp_path: Path, unique_name) -> None:  # type: ignore[no-untyped-def]
    from aitune_core.module import UnsupportedCallError

    module = ait.Module(Encoder().eval(), unique_name())
    tune_eager(module)
    module.release_weights("weights released for this test")
    assert all(p.is_meta for p in module.module.parameters())
    with pytest.raises(UnsupportedCallError, match="weights released for this test"):
        module(torch.randn(9, 8))  # batch 9 is outside the tuned 1..4
