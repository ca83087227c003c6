"""One cap on the whole cache folder: least recently used first, never what a running process uses.

Every test tunes with the recording backend (its one artifact is the weights file) in
the test's own cache folder, and checks the cache by walking it, not by asking aitune.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from store_helpers import FAST, SIZES, build_folders, folder_size, install, model, rows, samples, tune, wide_model

import aitune_core as ait
from aitune_core.backends.base import Backend, BuildContext
from aitune_core.cli import main
from aitune_core.config import Config, config
from aitune_core.log import capture
from aitune_core.profiling.timer import EAGER, ScriptedTimer
from aitune_core.store import eviction
from aitune_core.store.store import ArtifactStore
from aitune_core.store.usage import scan
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins

GONE = 999_999_999
"""A pid no process has (above the kernel's limit): what a killed run leaves is named after such a one."""


@pytest.fixture
def plugin(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> Any:
    return install(aitune_fake_dist, aitune_isolated_plugins)


def cache() -> Path:
    return config.cache_dir.expanduser().absolute()


def events_named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == name]


def test_tunes_of_new_weights_keep_the_cache_under_its_cap_and_log_every_eviction(
    plugin: Any, unique_name: Callable[[str], str]
) -> None:
    config.cache_max_mb = 1
    sizes, kept_modules, names = [], [], []
    with capture() as events:
        for seed in range(6):
            names.append(unique_name(f"seed{seed}"))
            wrapped, report = tune(plugin, names[-1], wide_model(seed))
            assert rows(report)[0].status == "selected" and not rows(report)[0].reused
            sizes.append(folder_size(cache()))  # the tuned module still serves from its build folder
            kept_modules.append(wrapped)
            if len(kept_modules) > 1:
                kept_modules.pop(0)  # the module tuned before this one goes: its build folder with it
                gc.collect()
    weights = os.path.getsize(build_folders(cache())[0] / "weights.pt")
    assert weights > 2**20 / 5  # each entry is a fifth of the cap or more: the cap is what bounds the store
    assert max(sizes) <= 2**20, sizes
    evicted = events_named(events, "cache evicted")
    assert evicted, "six entries of a quarter MiB do not fit 1 MiB"
    for event in evicted:
        assert event["what"].startswith("store/entries/") and "used longest ago" in event["why"]
        assert event["size_mb"] > 0.2 and "config.cache_max_mb" in event["why"]
        assert not (cache() / event["what"]).exists()
    entries = ArtifactStore.of_config().entries()
    assert len(entries) + len(evicted) == 6  # every entry that went was logged
    kept = {entry.record.module for entry in entries if entry.record is not None}
    assert kept == set(names[-len(entries) :])  # the oldest went first


def test_what_running_processes_use_is_never_evicted_and_what_the_gone_left_is_removed(
    plugin: Any, unique_name: Callable[[str], str]
) -> None:
    serving, _ = tune(plugin, unique_name("serving"), wide_model(0))
    tune(plugin, unique_name("other"), wide_model(1))
    (held,) = build_folders(cache())  # the serving module's; the other one was dropped, and its folder with it
    entries = ArtifactStore.of_config().entries()
    being_read = entries[0]
    marker = cache() / "store" / "reading" / f"{being_read.key}.{os.getpid()}-abcd"
    marker.parent.mkdir()
    marker.touch()  # this process reads that entry now
    left = [
        cache() / "builds" / "someidentity" / f"{GONE}-killed",
        cache() / "loaded" / f"deploy-{GONE}-killed",
        cache() / "store" / "staging" / f"{GONE}-killed",
    ]
    for folder in left:
        folder.mkdir(parents=True)
        (folder / "half-written.bin").write_bytes(b"\0" * 1000)
    with capture() as events:
        tidied = eviction.tidy(cache(), cap=0)
    assert held.is_dir() and being_read.folder.is_dir()  # in use: kept, though the cap is 0
    assert not any(folder.exists() for folder in left)
    assert not (cache() / "builds" / "someidentity").exists()
    cleaned = events_named(events, "cache cleaned")
    assert sorted(event["what"] for event in cleaned) == sorted(str(folder.relative_to(cache())) for folder in left)
    assert all(f"(pid {GONE}) is gone" in event["why"] and event["size_mb"] >= 0 for event in cleaned)
    assert [event["what"] for event in events_named(events, "cache evicted")] == [
        str(entry.folder.relative_to(cache())) for entry in entries[1:]
    ]
    (warning,) = events_named(events, "cache over its cap")
    assert warning["held_mb"] > 0 and warning["cap_mb"] == 0
    assert {unit.path for unit in tidied.usage.of("in use")} >= {held, being_read.folder}
    x = torch.stack(samples())
    torch.testing.assert_close(serving(x), serving.module(x), rtol=0, atol=0)


class WritesThenFails(Backend):
    """A compiler that writes into its build folder and then gives up."""

    name = "test_writes_then_fails"

    def _build(self, context: BuildContext) -> None:
        (context.cache_dir / "half.bin").write_bytes(b"\0" * 4096)
        raise RuntimeError("this compiler gives up")

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("never built")


def test_a_finished_tune_keeps_only_the_folder_its_winner_serves_from_until_the_module_goes(
    plugin: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    wrapped = ait.Module(model(), unique_name("tuned"))
    strategy = ait.MaxThroughputStrategy([WritesThenFails(), plugin.RecordingFileBackend()], profile=FAST)
    report = ait.tune(wrapped, samples(), batch_sizes=SIZES, strategy=strategy)
    assert [row.status for row in rows(report)] == ["failed", "selected"]
    (kept,) = build_folders(cache())
    assert (kept / "weights.pt").is_file()  # the winner's
    ait.save(wrapped, tmp_path / "ckpt")  # saving copies the artifact from there
    del wrapped, report
    gc.collect()
    assert build_folders(cache()) == []
    loaded = ait.load(model(), tmp_path / "ckpt")
    x = torch.stack(samples())
    torch.testing.assert_close(loaded(x), model()(x), rtol=0, atol=0)


def test_a_candidate_that_lost_gives_up_its_folder_when_it_is_dropped_without_a_garbage_collection(
    plugin: Any, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loser that sits in a reference cycle used to keep its folder until a full collection at the end of tune().

    That collection took about 110 ms per tune in a process with a large heap (a test run's).
    """

    class InACycle(plugin.RecordingFileBackend):  # type: ignore[name-defined,misc]
        name = "test_in_a_cycle"

        def _build(self, context: BuildContext) -> None:
            super()._build(context)
            self.me = self  # only a garbage collection would free it

    collections: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(1) or 0)
    wrapped = ait.Module(model(), unique_name("lost"))
    timer = ScriptedTimer({EAGER: 2e-3, "InACycle()": 1.5e-3}, default=1e-3)  # the recording backend wins
    strategy = ait.MaxThroughputStrategy([InACycle(), plugin.RecordingFileBackend()], profile=FAST, timer=timer)
    report = ait.tune(wrapped, samples(), batch_sizes=SIZES, strategy=strategy)
    assert [row.status for row in rows(report)] == ["passed", "selected"]
    (kept,) = build_folders(cache())  # the winner's; the loser's went when it was dropped
    assert kept.name.split("-")[0] == str(os.getpid()) and (kept / "weights.pt").is_file()
    assert collections == []


def test_the_subprocess_executor_leaves_only_the_winners_folder(plugin: Any, unique_name: Callable[[str], str]) -> None:
    wrapped, report = tune(plugin, unique_name("child"), executor="subprocess")
    (row,) = rows(report)
    assert row.worker and row.status == "selected"
    kept = build_folders(cache())  # the child's, built for this process, and the winner's context here
    assert [folder.name.split("-")[0] for folder in kept] == [str(os.getpid())] * 2
    assert len([folder for folder in kept if (folder / "weights.pt").is_file()]) == 1
    del wrapped, report, row  # the row holds the winner too
    gc.collect()
    assert build_folders(cache()) == []


def test_the_next_tune_removes_what_killed_runs_left_and_the_cli_shows_every_part(
    plugin: Any, unique_name: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    killed = cache() / "builds" / "someidentity" / f"{GONE}-killed"
    killed.mkdir(parents=True)
    (killed / "package.pt2").write_bytes(b"\0" * 2048)
    export = cache() / "exports" / "somekey"
    export.mkdir(parents=True)
    (export / "model.onnx").write_bytes(b"\0" * 4096)
    os.utime(export, (1_000_000, 1_000_000))  # written long ago: evicted before the store's entries
    os.utime(export / "model.onnx", (1_000_000, 1_000_000))
    wrapped, report = tune(plugin, unique_name("next"))
    assert not killed.exists()
    capsys.readouterr()
    assert main(["cache", "list"]) == 0
    listed = capsys.readouterr().out
    for part in ("store: built candidates", "builds: build folders", "exports: ONNX exports"):
        assert part in listed
    assert "cap (config.cache_max_mb, AITUNE_CACHE_MAX_MB)" in listed and "1 entry" in listed
    config.cache_max_mb = 1
    assert main(["cache", "prune"]) == 0
    assert export.exists()  # under the cap: nothing evicted
    assert main(["cache", "prune", "--max-mb", "0"]) == 0
    pruned = capsys.readouterr().out
    assert not export.exists() and "removed 1 store entries" in pruned and "exports 1" in pruned
    assert "kept, in use" in pruned and len(build_folders(cache())) == 1  # the serving module's folder stays
    del wrapped, report  # the report's row holds the winner too
    gc.collect()
    assert main(["cache", "clear"]) == 0
    assert build_folders(cache()) == [] and "0 entries" in capsys.readouterr().out


def set_mtime(path: Path, when: float) -> None:
    for item in [path, *path.rglob("*")]:
        os.utime(item, (when, when))


def test_eviction_goes_by_last_use_across_parts(plugin: Any, unique_name: Callable[[str], str]) -> None:
    wrapped, report = tune(plugin, unique_name("saved"), wide_model(0))
    for name in ("used", "unused"):  # checkpoints as aitune-jit keeps them, in the cache
        ait.save(wrapped, cache() / "jit" / name)
        set_mtime(cache() / "jit" / name, 1_000_000)
    (entry,) = ArtifactStore.of_config().entries()
    os.utime(entry.folder / "used", (2_000_000, 2_000_000))  # the store entry: used after both were written
    export = cache() / "exports" / "somekey"
    export.mkdir(parents=True)
    (export / "model.onnx").write_bytes(b"\0" * 4096)
    set_mtime(export, 1_500_000)
    del wrapped, report
    gc.collect()
    loaded = ait.load(wide_model(0), cache() / "jit" / "used")  # loading a checkpoint uses it now
    with capture() as events:
        eviction.tidy(cache(), cap=0)
    order = [event["what"] for event in events_named(events, "cache evicted")]
    assert order == ["jit/unused", "exports/somekey", str(entry.folder.relative_to(cache())), "jit/used"]
    assert [unit.part for unit in scan(cache()).units] == ["loaded"]  # the loaded model's folder: in use
    x = torch.stack(samples())
    torch.testing.assert_close(loaded(x), wide_model(0)(x), rtol=0, atol=0)  # it still serves


def test_hard_links_are_counted_once(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    (root / "exports" / "key").mkdir(parents=True)
    (root / "builds" / "identity" / f"{os.getpid()}-abc").mkdir(parents=True)
    shared = root / "exports" / "key" / "model.onnx"
    shared.write_bytes(b"\0" * 10_000)
    os.link(shared, root / "builds" / "identity" / f"{os.getpid()}-abc" / "model.onnx")
    usage = scan(root)
    assert usage.total == 10_000 and usage.part_size("exports") == usage.part_size("builds") == 10_000
    (export,) = usage.of("evictable")
    assert usage.drop(export) == 0  # the build folder still holds the bytes
    assert usage.total == 10_000


def test_an_export_being_written_goes_once_its_writer_is_gone(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    writing = {
        f".key.{GONE}-abc": "garbage",  # a killed writer's
        f".key.{os.getpid()}-abc": "in use",  # this process writes it now
        ".key.k3x9q0ab": "in use",  # an older aitune's: no pid to tell whether its writer lives
    }
    for name in writing:
        (root / "exports" / name).mkdir(parents=True)
        (root / "exports" / name / "model.onnx").write_bytes(b"\0" * 1000)
    usage = scan(root)
    assert {unit.path.name: unit.status for unit in usage.units} == writing
    tidied = eviction.tidy(root, cap=0)
    assert [unit.path.name for unit, _ in tidied.removed] == [f".key.{GONE}-abc"]
    assert sorted(path.name for path in (root / "exports").iterdir()) == sorted(list(writing)[1:])


def test_the_cap_settings_and_their_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (config.cache_max_mb, config.store_max_mb) == (10240, None)
    store = ArtifactStore.of_config()
    assert (store.max_bytes, store.cache_max_bytes) == (None, 10240 * 2**20)  # the store shares the cache's cap
    monkeypatch.setenv("AITUNE_CACHE_MAX_MB", "300")
    monkeypatch.setenv("AITUNE_STORE_MAX_MB", "100")  # the old setting: a cap on the store alone, within
    fresh = Config()
    assert (fresh.cache_max_mb, fresh.store_max_mb) == (300, 100)
    config.cache_max_mb, config.store_max_mb = 300, 100
    store = ArtifactStore.of_config()
    assert (store.max_bytes, store.cache_max_bytes) == (100 * 2**20, 300 * 2**20)
    shipped = ArtifactStore.from_data(store.to_data())  # what a worker gets
    assert shipped is not None and shipped.to_data() == store.to_data()
    monkeypatch.setenv("AITUNE_CACHE_MAX_MB", "lots")
    with pytest.raises(ValueError, match="AITUNE_CACHE_MAX_MB must be a whole number of MiB"):
        Config()
    with pytest.raises(ValueError, match=r"config\.cache_max_mb"):
        config.cache_max_mb = 0
