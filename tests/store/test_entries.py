"""Entries the store refuses (changed, foreign, open to others, half written), its LRU cap, and `aitune cache`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from store_helpers import install, model, rows, tune

from aitune_core.cli import main
from aitune_core.config import config
from aitune_core.log import capture
from aitune_core.store.store import STAGING, ArtifactStore, Listed
from aitune_core.store.trust import SECRET_NAME
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins


@pytest.fixture
def plugin(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> Any:
    return install(aitune_fake_dist, aitune_isolated_plugins)


def store() -> ArtifactStore:
    found = ArtifactStore.from_config()
    assert found is not None
    return found


def only_entry() -> Listed:
    (entry,) = store().entries()
    return entry


def changed_model(amount: float) -> torch.nn.Module:
    changed = model()
    with torch.no_grad():
        changed[0].bias[0] += amount
    return changed


def tune_again(plugin: Any, name: str) -> tuple[Any, list[dict[str, Any]]]:
    with capture() as events:
        wrapped, report = tune(plugin, name)
    (row,) = rows(report)
    x = torch.randn(4, 8)
    torch.testing.assert_close(wrapped(x), wrapped.module(x), rtol=0, atol=0)
    return row, [e for e in events if e["event"] == "stored build refused; building it again"]


def test_an_artifact_changed_in_the_store_is_refused_and_built_again(
    plugin: Any, unique_name: Callable[[str], str]
) -> None:
    tune(plugin, unique_name("first"))
    (stored,) = (only_entry().folder / "artifacts" / "weights").iterdir()
    other = changed_model(1.0).state_dict()
    torch.save(other, stored)  # tampered: a different engine under the recorded name
    row, refused = tune_again(plugin, unique_name("second"))
    assert not row.reused and row.status == "selected" and len(plugin.BUILDS) == 2
    assert len(refused) == 1 and "changed after it was stored" in refused[0]["reason"]
    row, refused = tune_again(plugin, unique_name("third"))  # the rebuild was stored in its place
    assert row.reused and not refused and len(plugin.BUILDS) == 2


def test_an_entry_from_another_store_is_foreign_and_refused(plugin: Any, unique_name: Callable[[str], str]) -> None:
    tune(plugin, unique_name("first"))
    (store().root / SECRET_NAME).unlink()  # as if the entry had been copied in from another cache
    row, refused = tune_again(plugin, unique_name("second"))
    assert not row.reused and len(plugin.BUILDS) == 2
    assert "not written by this user's tune runs" in refused[0]["reason"]


def test_an_entry_other_users_may_write_is_refused(plugin: Any, unique_name: Callable[[str], str]) -> None:
    tune(plugin, unique_name("first"))
    folder = only_entry().folder
    folder.chmod(0o777)
    row, refused = tune_again(plugin, unique_name("second"))
    assert not row.reused and len(plugin.BUILDS) == 2
    assert "may be written by other users" in refused[0]["reason"]


def test_an_incomplete_entry_is_refused_and_dead_staging_is_pruned(
    plugin: Any, unique_name: Callable[[str], str]
) -> None:
    tune(plugin, unique_name("first"))
    (only_entry().folder / "entry.sig").unlink()
    dead = store().root / STAGING / "999999999-abc"  # a run killed while writing its entry
    dead.mkdir(parents=True)
    (dead / "entry.json").write_text("{")
    row, refused = tune_again(plugin, unique_name("second"))
    assert not row.reused and "incomplete" in refused[0]["reason"]
    assert not dead.exists()  # the rebuild's store pruned it; a live run's staging would stay


def test_the_cap_evicts_the_entry_used_longest_ago(plugin: Any, unique_name: Callable[[str], str]) -> None:
    for index, amount in enumerate((0.0, 1.0, 2.0)):
        tune(plugin, unique_name(f"model{index}"), changed_model(amount))
    entries = store().entries()
    assert len(entries) == 3
    first = next(e for e in entries if e.record is not None and ":model0:" in e.record.module)
    for offset, entry in enumerate(sorted(entries, key=lambda e: e.record.module if e.record else "")):
        os.utime(entry.folder / "used", (1_000_000 + offset, 1_000_000 + offset))  # model0 oldest, model2 newest
    tune(plugin, unique_name("reuse0"), changed_model(0.0))  # model0's entry is used now: the newest
    assert len(plugin.BUILDS) == 3
    sizes = [e.size for e in store().entries()]
    removed = store().prune(max_bytes=sum(sizes) - 1)
    assert [e.record.module.rsplit(":", 2)[-2] for e in removed if e.record] == ["model1"]
    assert first.key in {e.key for e in store().entries()}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["cache", *args]) == 0
    return capsys.readouterr().out


def test_aitune_cache_lists_prunes_and_clears(
    plugin: Any, unique_name: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    tune(plugin, unique_name("a"), changed_model(0.0))
    tune(plugin, unique_name("b"), changed_model(1.0))
    capsys.readouterr()
    listed = cli(capsys)
    assert listed.count("RecordingFileBackend() [aitune-test-recording 1.0]") == 2
    assert "2 entries" in listed and "MiB" in listed and "Last used" in listed
    assert "store: built candidates" in listed and "cap (config.cache_max_mb" in listed
    assert "removed 0 (0.0 MiB)" in cli(capsys, "prune")  # under the cap
    oldest = store().entries()[0]
    os.utime(oldest.folder / "used", (1_000_000, 1_000_000))
    entry_size = max(e.size for e in store().entries())
    config.store_max_mb = 1
    pruned = cli(capsys, "prune", "--max-mb", "0")
    assert "removed 2 store entries" in pruned and "0 entries" in pruned
    tune(plugin, unique_name("c"), changed_model(2.0))
    assert entry_size < 2**20
    assert "removed 1 (0.0 MiB): store 1" in cli(capsys, "clear")
    assert "0 entries" in cli(capsys, "list")
    assert not any(Path(config.cache_dir / "store" / "entries").glob("*/*"))
