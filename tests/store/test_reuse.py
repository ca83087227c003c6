"""A second tune of the same weights loads each candidate from the store; anything else builds."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from store_helpers import install, model, rows, samples, tune

import aitune_core as ait
from aitune_core.config import config
from aitune_core.log import capture
from aitune_core.store.store import ArtifactStore
from aitune_core.testing import fixtures
from aitune_core.testing.load_guard import assert_unchanged, fingerprint

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins


@pytest.fixture
def plugin(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> Any:
    return install(aitune_fake_dist, aitune_isolated_plugins)


def reasons(report: Any) -> list[str]:
    """The summary table's Reason column."""
    return [row[-1] for row in report.rows()]


def store() -> ArtifactStore:
    found = ArtifactStore.from_config()
    assert found is not None
    return found


def test_a_second_tune_of_the_same_weights_builds_nothing_and_says_reused(
    plugin: Any, unique_name: Callable[[str], str]
) -> None:
    first, report = tune(plugin, unique_name("first"))
    assert [first.name] == plugin.BUILDS
    (row,) = rows(report)
    assert row.status == "selected" and not row.reused and reasons(report) == ["", ""]
    assert len(store().entries()) == 1

    second, report = tune(plugin, unique_name("second"))  # another wrapper, a model built the same way
    assert [first.name] == plugin.BUILDS  # no build for the second
    (row,) = rows(report)
    assert row.status == "selected" and row.reused and row.max_abs_error == 0.0  # validated against eager
    assert row.sweep, "a reused candidate is profiled"
    assert reasons(report) == ["", "reused"]  # eager's row, then the candidate's
    x = torch.randn(4, 8)
    torch.testing.assert_close(second(x), second.module(x), rtol=0, atol=0)


def test_one_changed_weight_builds_again(plugin: Any, unique_name: Callable[[str], str]) -> None:
    tune(plugin, unique_name("first"))
    changed = model()
    with torch.no_grad():
        changed[0].weight[0, 0] += 1e-3
    second, report = tune(plugin, unique_name("changed"), changed)
    assert plugin.BUILDS[-1] == second.name and len(plugin.BUILDS) == 2
    assert not any(row.reused for row in rows(report))
    assert len(store().entries()) == 2


def test_another_plugin_version_builds_again(
    aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any, unique_name: Callable[[str], str]
) -> None:
    plugin = install(aitune_fake_dist, aitune_isolated_plugins, version="1.0")
    tune(plugin, unique_name("v1"))
    parts = [entry.record.parts for entry in store().entries() if entry.record is not None]
    assert [(p["distribution"], p["version"]) for p in parts] == [("aitune-test-recording", "1.0")]
    assert parts[0]["torch"] == torch.__version__ and parts[0]["device"] == "cpu"


def test_the_users_model_is_untouched_by_storing_and_reusing(plugin: Any, unique_name: Callable[[str], str]) -> None:
    stored_from = model()
    before_storing = fingerprint(stored_from)
    tune(plugin, unique_name("stores"), stored_from)
    users = model()
    before = fingerprint(users)
    wrapped, report = tune(plugin, unique_name("reuses"), users)
    assert rows(report)[0].reused and wrapped.module is users
    assert_unchanged(before_storing, fingerprint(stored_from))
    assert_unchanged(before, fingerprint(users))


def test_with_the_store_off_every_tune_builds_and_nothing_is_written(
    plugin: Any, unique_name: Callable[[str], str]
) -> None:
    config.store = False
    tune(plugin, unique_name("first"))
    _, report = tune(plugin, unique_name("second"))
    assert len(plugin.BUILDS) == 2 and not any(row.reused for row in rows(report))
    assert not (config.cache_dir / "store" / "entries").exists()


def test_a_reused_winner_saves_and_loads_like_a_built_one(
    plugin: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    tune(plugin, unique_name("first"))
    name = unique_name("second")
    second, report = tune(plugin, name)
    assert rows(report)[0].reused
    path = ait.save(second, tmp_path / "ckpt")
    del second
    gc.collect()
    loaded = ait.load(model(), path)
    x = torch.stack(samples())
    torch.testing.assert_close(loaded(x), model()(x), rtol=0, atol=0)


def test_the_subprocess_executor_reuses_what_in_process_tuning_stored(
    plugin: Any, unique_name: Callable[[str], str]
) -> None:
    tune(plugin, unique_name("here"))
    with capture() as events:
        second, report = tune(plugin, unique_name("child"), executor="subprocess")
    (row,) = rows(report)
    assert row.worker and row.reused and row.status == "selected"
    assert any(event["event"] == "build reused" for event in events)
    assert [plugin.BUILDS[0]] == plugin.BUILDS  # nothing built here, and the child reused
    x = torch.randn(2, 8)
    torch.testing.assert_close(second(x), second.module(x), rtol=0, atol=0)
