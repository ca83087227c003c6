"""Each hook, watched firing through the checked-in ``aitune-fake-good`` plugin."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import aitune_core
from aitune_core.backends import BackendState, BuildContext, TorchEagerBackend
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.metadata import SampleMetadata
from aitune_core.plugins import Candidate, PluginStatus
from aitune_core.plugins.registry import PluginRegistry
from aitune_core.serialization import converter

FAKE_DISTS = Path(__file__).parent / "fake_dists"
_names = itertools.count()


@pytest.fixture
def good(load_fakes: Callable[..., PluginRegistry]) -> Iterator[ModuleType]:
    load_fakes("good")
    import aitune_fake_good

    aitune_fake_good.EVENTS.clear()
    yield aitune_fake_good
    aitune_fake_good.KEY_PART = None
    aitune_fake_good.STRATEGY = None


def record(model: torch.nn.Module, name: str, *calls: tuple[Any, ...]) -> aitune_core.Module:
    wrapped = aitune_core.Module(model, f"{name}-{next(_names)}")
    for args in calls:
        with global_context:
            global_context.set(BATCH_SIZE_KEY, args[0].shape[0])
            wrapped(*args)
    return wrapped


def context_for(wrapped: aitune_core.Module, tmp_path: Path) -> BuildContext:
    graph = next(iter(wrapped.graphs.values()))
    return BuildContext(
        module=wrapped.module,
        module_name=wrapped.name,
        graph_spec=graph.spec,
        samples=graph.samples,
        device=torch.device("cpu"),
        cache_dir=tmp_path,
        signature=wrapped.signature,
    )


def test_registered_containers_are_walked_and_taken_back(good: ModuleType, aitune_isolated_plugins: Any) -> None:
    pair = good.Pair(torch.zeros(2, 3), torch.ones(2, 5))
    paths = [locator.display_path for locator, _ in SampleMetadata.from_inputs({"x": pair}).tensor_data]
    assert paths == ["x.left", "x.right"]
    aitune_isolated_plugins.load()  # the built-in plugin alone
    assert SampleMetadata.from_inputs({"x": pair}).tensor_data == []


def test_graph_key_parts_split_graphs(good: ModuleType) -> None:
    wrapped = aitune_core.Module(torch.nn.Linear(4, 4), f"key-parts-{next(_names)}")
    x = torch.randn(2, 4)
    good.KEY_PART = "mode-a"
    wrapped(x)
    wrapped(x)
    good.KEY_PART = "mode-b"
    wrapped(x)
    good.KEY_PART = None
    wrapped(x)
    assert len(wrapped.graph_specs) == 3
    keys = [spec.key for spec in wrapped.graph_specs]
    assert keys[0][-1] == ("plugin", (("aitune-fake-good:good", "mode-a"),))
    assert keys[1][-1] == ("plugin", (("aitune-fake-good:good", "mode-b"),))
    assert keys[2][-1][0] != "plugin"


def test_no_key_parts_without_plugins(aitune_isolated_plugins: Any) -> None:
    registry = aitune_isolated_plugins.load()
    assert registry.graph_key_parts() is None


def test_lifecycle_hooks_observe_and_wrap_every_step(good: ModuleType, tmp_path: Path) -> None:
    wrapped = record(torch.nn.Linear(4, 2), "lifecycle", (torch.randn(1, 4),), (torch.randn(3, 4),))
    backend = good.FakeGoodBackend()
    context = context_for(wrapped, tmp_path)
    backend.build(context)
    backend.deactivate()
    backend.activate(context)
    backend.deploy(context)
    steps = [event[:2] for event in good.EVENTS]
    expected = []
    for step in ("build", "deactivate", "activate", "deploy"):
        expected += [("before", step), ("wrap enter", step), ("wrap exit", step), ("after", step)]
    assert steps == expected
    befores = [event for event in good.EVENTS if event[0] == "before"]
    assert [event[3] for event in befores] == ["INIT", "ACTIVE", "INACTIVE", "ACTIVE"]
    afters = [event for event in good.EVENTS if event[0] == "after"]
    assert all(event[2] == "fake_good" and event[3] >= 0 and event[4] is None for event in afters)


def test_lifecycle_hooks_see_a_failing_step(good: ModuleType, tmp_path: Path) -> None:
    wrapped = record(torch.nn.Linear(4, 2), "fail-build", (torch.randn(1, 4),), (torch.randn(3, 4),))
    backend = good.FakeGoodBackend()
    with pytest.raises(ValueError, match="cannot build this one"):
        backend.build(context_for(wrapped, tmp_path))
    assert backend.state is BackendState.INIT and backend.context is None
    assert [event[:2] for event in good.EVENTS] == [
        ("before", "build"),
        ("wrap enter", "build"),
        ("wrap error", "build"),
        ("wrap exit", "build"),
        ("after", "build"),
    ]
    assert good.EVENTS[-1][4] == "ValueError"


def test_illegal_step_reaches_no_hook(good: ModuleType) -> None:
    backend = good.FakeGoodBackend()
    with pytest.raises(aitune_core.IllegalStateTransitionError):
        backend.deactivate()
    assert good.EVENTS == []


def test_wrap_step_must_be_a_wrapper(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    dist = aitune_fake_dist(
        "aitune-fake-plain-wrap",
        """
        from aitune_core import hookimpl

        AITUNE_PLUGIN_API = 1


        @hookimpl
        def aitune_wrap_step(step):
            return None
        """,
    )
    registry = aitune_isolated_plugins.load(dist)
    record = registry.records()[1]
    assert record.status is PluginStatus.FAILED
    assert record.reason == "aitune_wrap_step must be implemented as a wrapper: @hookimpl(wrapper=True)"
    assert not registry.observes_lifecycle


def test_extend_converter_makes_plugin_configs_serialisable(good: ModuleType) -> None:
    backend = good.FakeGoodBackend(level=good.Level(3))
    assert backend.config_dict() == {"level": 3}
    restored = good.FakeGoodBackend.from_dict(backend.to_dict())
    assert restored.config == backend.config
    assert converter().structure({"level": 7}, good.FakeGoodConfig).level == good.Level(7)


def test_converter_is_rebuilt_when_plugins_change(good: ModuleType, aitune_isolated_plugins: Any) -> None:
    assert converter().unstructure(good.Level(2)) == 2
    aitune_isolated_plugins.load()
    level = good.Level(2)
    assert converter().unstructure(level) is level, "the plugin's hook must be gone"


def test_default_candidates_are_ordered_by_priority_then_name(load_fakes: Callable[..., PluginRegistry]) -> None:
    load_fakes("unavailable", "good")
    candidates = aitune_core.plugins.default_candidates("cpu")
    assert [(c.name, c.priority, c.plugin, c.available) for c in candidates] == [
        ("fake_good", 50, "aitune-fake-good", True),
        ("fake_needs_fakelib", 50, "aitune-fake-unavailable", False),
        ("eager", 0, "aitune-core", True),
    ]
    assert candidates[1].availability is not None
    assert candidates[1].availability.reason == "fakelib not importable"
    assert all(candidate.backend.state is BackendState.INIT for candidate in candidates)


def test_candidates_of_unregistered_classes_are_dropped(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    dist = aitune_fake_dist(
        "aitune-fake-stray",
        """
        from aitune_core import hookimpl
        from aitune_core.backends import TorchEagerBackend
        from aitune_core.plugins import Candidate

        AITUNE_PLUGIN_API = 1


        class StrayBackend(TorchEagerBackend):
            name = "stray"


        @hookimpl
        def aitune_default_candidates(device):
            return [Candidate(StrayBackend(), priority=10)]
        """,
    )
    aitune_isolated_plugins.load(dist)
    with aitune_core.log.capture() as events:
        names = [candidate.name for candidate in aitune_core.plugins.default_candidates("cpu")]
    assert names == ["eager"]
    assert any(event["event"] == "default candidate of an unregistered backend class" for event in events)


def test_choose_strategy_asks_plugins(good: ModuleType) -> None:
    assert aitune_core.plugins.choose_strategy(object(), "cpu") is None
    good.STRATEGY = marker = aitune_core.FirstWinsStrategy()
    assert aitune_core.plugins.choose_strategy(object(), "cpu") is marker


def test_public_names() -> None:
    import aitune_core.plugins as package

    assert aitune_core.hookimpl is package.hookimpl
    assert callable(aitune_core.plugins)
    assert aitune_core.plugins() == package.plugins()
    assert isinstance(Candidate(TorchEagerBackend()).priority, int)
