"""A full disk (ENOSPC) while building or storing: a clear message naming the folder, and nothing lost.

The disk fills up at the points where aitune writes: a stored artifact's copy, the
entry's record, the flush before the entry is published, and a backend's own build.
Each writes part of its file and then fails, as a full disk does. The entry stored
before, the user's model, and what the tuned module serves must come through whole.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from store_helpers import build_folders, install, model, rows, samples, tune, wide_model

from aitune_core.config import config
from aitune_core.log import capture
from aitune_core.store import entry as entry_module
from aitune_core.store import store as store_module
from aitune_core.store.store import ArtifactStore
from aitune_core.testing import fixtures
from aitune_core.testing.load_guard import assert_unchanged, fingerprint

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins


@pytest.fixture
def plugin(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> Any:
    return install(aitune_fake_dist, aitune_isolated_plugins)


def disk_full(path: Path) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def half_then_full(path: Path, data: bytes) -> None:
    """What a write onto a full disk does: part of the bytes land, then ENOSPC."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[: len(data) // 2])
    raise disk_full(path)


def fill_artifact_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    def copy(source: Path, target: Path) -> tuple[str, int]:
        half_then_full(target, source.read_bytes())
        raise AssertionError("unreachable")

    monkeypatch.setattr(entry_module, "link_or_copy_hashed", copy)


def fill_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry_module, "write_whole", half_then_full)


def fill_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    def flush(folder: Path) -> None:
        raise disk_full(folder)

    monkeypatch.setattr(store_module, "fsync_tree", flush)


def cache() -> Path:
    return config.cache_dir.expanduser().absolute()


def store() -> ArtifactStore:
    return ArtifactStore.of_config()


@pytest.mark.parametrize("fill", [fill_artifact_copy, fill_record, fill_flush], ids=["artifact", "record", "flush"])
def test_a_full_disk_while_storing_loses_nothing(
    plugin: Any,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    fill: Callable[[pytest.MonkeyPatch], None],
) -> None:
    tune(plugin, unique_name("stored"), wide_model(0))
    (stored,) = store().entries()
    stored_bytes = {path: path.read_bytes() for path in stored.folder.rglob("*") if path.is_file()}
    users = wide_model(1)
    before = fingerprint(users)
    with monkeypatch.context() as patch, capture() as events:
        fill(patch)
        wrapped, report = tune(plugin, unique_name("full"), users)
    (row,) = rows(report)
    assert row.status == "selected" and not row.reused  # the build serves; only keeping it failed
    (warning,) = [event for event in events if event["event"] == "build not stored"]
    assert "no space left on the disk holding" in warning["reason"] and str(cache() / "store") in warning["reason"]
    assert "config.cache_max_mb" in warning["reason"] and "AITUNE_CACHE_DIR" in warning["reason"]
    assert [entry.key for entry in store().entries()] == [stored.key]  # nothing half written is listed
    assert {path: path.read_bytes() for path in stored.folder.rglob("*") if path.is_file()} == stored_bytes
    assert list((cache() / "store" / "staging").iterdir()) == []  # the partial entry is gone
    assert_unchanged(before, fingerprint(users))
    x = torch.stack(samples())
    torch.testing.assert_close(wrapped(x), users(x), rtol=0, atol=0)

    _, report = tune(plugin, unique_name("again"), wide_model(0))  # the entry stored before still loads
    (row,) = rows(report)
    assert row.reused and row.max_abs_error == 0.0
    _, report = tune(plugin, unique_name("room"), wide_model(1))  # with room again, the build is stored
    assert not rows(report)[0].reused and len(store().entries()) == 2


def test_a_full_disk_while_building_fails_the_row_with_the_folder_and_the_fix(
    plugin: Any, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tune(plugin, unique_name("stored"))
    (stored,) = store().entries()
    users = wide_model(2)
    before = fingerprint(users)

    def full_save(obj: Any, path: Any, *args: Any, **kwargs: Any) -> None:
        half_then_full(Path(path), b"\0" * 4096)

    with monkeypatch.context() as patch:
        patch.setattr(plugin.torch, "save", full_save)  # the backend's own write: its engine file
        wrapped, report = tune(plugin, unique_name("full"), users)
    (row,) = [row for row in rows(report) if row.backend == "RecordingFileBackend()"]
    assert (row.status, row.stage) == ("failed", "build")
    assert "no space left on the disk holding" in row.reason and str(cache() / "builds") in row.reason
    assert "free space there" in row.reason and "config.cache_max_mb" in row.reason
    assert "AITUNE_CACHE_DIR" in row.reason
    assert not any((folder / "weights.pt").exists() for folder in build_folders(cache()))  # the half-written
    # engine went with its folder; eager, which serves, keeps its own (empty) one while the module lives
    assert [entry.key for entry in store().entries()] == [stored.key]
    assert_unchanged(before, fingerprint(users))
    x = torch.stack(samples())
    torch.testing.assert_close(wrapped(x), users(x), rtol=0, atol=0)  # eager serves
    _, report = tune(plugin, unique_name("again"), model())
    assert rows(report)[0].reused
