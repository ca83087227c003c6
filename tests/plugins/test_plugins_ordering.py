"""Hooks reach plugins through their guarded proxies in exactly pluggy's order, with pluggy's options.

Each test also registers the same plugin modules, unguarded, with a plain
``pluggy.PluginManager`` and checks that it sees the same order: what pluggy documents
is what plugins get, guard or no guard.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy
import pytest
import torch

import aitune_core
from aitune_core import log
from aitune_core.backends import BackendState, TorchEagerBackend
from aitune_core.plugins import PluginStatus, hookspecs
from aitune_core.plugins.registry import PluginRegistry
from aitune_core.testing.models import TinyMLP, mlp_call
from aitune_core.testing.recording import record

LEDGER = "ORDER: list[str] = []\n"
"""A module every test plugin appends to, so one list shows the order they ran in."""

_CHOOSER = """
import aitune_fake_ledger
from aitune_core import hookimpl

AITUNE_PLUGIN_API = 1
ANSWER = None
RAISE = False


@hookimpl({options})
def aitune_choose_strategy(module):
    aitune_fake_ledger.ORDER.append({name!r})
    if RAISE:
        raise RuntimeError("{name} cannot choose")
    return ANSWER
"""

_WRAPPER = """
import aitune_fake_ledger
from aitune_core import hookimpl

AITUNE_PLUGIN_API = 1


@hookimpl(wrapper=True{options})
def aitune_wrap_step(step):
    aitune_fake_ledger.ORDER.append("enter {name}")
    try:
        return (yield)
    finally:
        aitune_fake_ledger.ORDER.append("exit {name}")
"""


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    folder = tmp_path / "ledger"
    folder.mkdir()
    (folder / "aitune_fake_ledger.py").write_text(LEDGER)
    monkeypatch.syspath_prepend(str(folder))
    import aitune_fake_ledger

    yield aitune_fake_ledger.ORDER
    del sys.modules["aitune_fake_ledger"]


def plugins_named(*names: str) -> list[ModuleType]:
    return [sys.modules[f"aitune_fake_{name}"] for name in names]


def plain_pluggy(*modules: ModuleType) -> pluggy.PluginManager:
    """The same plugin modules, registered unguarded with pluggy, in the same order."""
    manager = pluggy.PluginManager("aitune")
    manager.add_hookspecs(hookspecs)
    for module in modules:
        manager.register(module)
    return manager


def load_choosers(aitune_fake_dist: Any, isolated: Any, options: dict[str, str]) -> PluginRegistry:
    dists = [
        aitune_fake_dist(f"aitune-fake-{name}", _CHOOSER.format(name=name, options=option))
        for name, option in options.items()
    ]
    registry: PluginRegistry = isolated.load(*dists)
    return registry


CHOOSERS = {"a": "trylast=True", "b": "", "c": "tryfirst=True", "d": ""}
"""Registered in this order (by distribution name); pluggy asks c (tryfirst), d, b (last in first), then a."""


def test_every_hook_is_asked_in_pluggys_order(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, ledger: list[str]
) -> None:
    registry = load_choosers(aitune_fake_dist, aitune_isolated_plugins, CHOOSERS)
    assert aitune_core.plugins.choose_strategy(object(), "cpu") is None
    assert ledger == ["c", "d", "b", "a"]
    ledger.clear()
    plain_pluggy(*plugins_named("a", "b", "c", "d")).hook.aitune_choose_strategy(module=object(), device="cpu")
    assert ledger == ["c", "d", "b", "a"], "plain pluggy asks in the same order"
    options = {
        impl.plugin_name: (impl.tryfirst, impl.trylast) for impl in registry.hook.aitune_choose_strategy.get_hookimpls()
    }
    assert options == {
        "aitune-fake-a:aitune_fake_a": (False, True),
        "aitune-fake-b:aitune_fake_b": (False, False),
        "aitune-fake-c:aitune_fake_c": (True, False),
        "aitune-fake-d:aitune_fake_d": (False, False),
    }


def test_firstresult_stops_at_the_first_answer(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, ledger: list[str]
) -> None:
    load_choosers(aitune_fake_dist, aitune_isolated_plugins, CHOOSERS)
    b, a = plugins_named("b", "a")
    b.ANSWER = chosen = aitune_core.FirstWinsStrategy()
    a.ANSWER = aitune_core.MaxThroughputStrategy()
    assert aitune_core.plugins.choose_strategy(object(), "cpu") is chosen
    assert ledger == ["c", "d", "b"], "the trylast plugin is never asked"


def test_a_raising_tryfirst_plugin_is_disabled_and_the_next_one_answers(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, ledger: list[str]
) -> None:
    registry = load_choosers(aitune_fake_dist, aitune_isolated_plugins, CHOOSERS)
    c, d = plugins_named("c", "d")
    c.RAISE = True
    d.ANSWER = chosen = aitune_core.FirstWinsStrategy()
    with log.capture() as events:
        assert aitune_core.plugins.choose_strategy(object(), "cpu") is chosen
    assert ledger == ["c", "d"]
    [record_c] = [r for r in registry.records() if r.distribution == "aitune-fake-c"]
    assert (record_c.status, record_c.reason) == (
        PluginStatus.FAILED,
        "raised RuntimeError: c cannot choose in aitune_choose_strategy; disabled",
    )
    assert [e["hook"] for e in events if e["log_level"] == "error"] == ["aitune_choose_strategy"]
    ledger.clear()
    assert aitune_core.plugins.choose_strategy(object(), "cpu") is chosen
    assert ledger == ["d"], "a disabled plugin is asked no more"


def test_pluggy_holds_the_guarded_namespaces_not_the_plugins(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, ledger: list[str]
) -> None:
    registry = load_choosers(aitune_fake_dist, aitune_isolated_plugins, {"b": ""})
    [module] = plugins_named("b")
    assert not registry.is_registered(module)
    namespace = registry.get_plugin("aitune-fake-b:aitune_fake_b")
    assert namespace is not None and namespace is not module
    assert namespace.aitune_choose_strategy is not module.aitune_choose_strategy
    assert module.aitune_choose_strategy.__name__ == namespace.aitune_choose_strategy.__name__


def build_eager(tmp_path: Path) -> TorchEagerBackend:
    context = record(TinyMLP(), mlp_call, (1, 2), tmp_path)
    backend = TorchEagerBackend()
    backend.build(context)
    assert backend.state is BackendState.ACTIVE
    return backend


WRAPPERS = {"w1": ", tryfirst=True", "w2": "", "w3": ""}


def test_wrappers_nest_in_pluggys_order(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, ledger: list[str], tmp_path: Path
) -> None:
    aitune_isolated_plugins.load(
        *(
            aitune_fake_dist(f"aitune-fake-{name}", _WRAPPER.format(name=name, options=o))
            for name, o in WRAPPERS.items()
        )
    )
    build_eager(tmp_path)
    nesting = ["enter w1", "enter w3", "enter w2", "exit w2", "exit w3", "exit w1"]
    assert ledger == nesting, "tryfirst outermost, then the plugin registered last"
    ledger.clear()
    plain = plain_pluggy(*plugins_named("w1", "w2", "w3"))
    plain.hook.aitune_wrap_step.call_extra([lambda: ledger.append("step")], {"step": "build", "backend": None})
    assert ledger == [*nesting[:3], "step", *nesting[3:]], "plain pluggy nests them the same way"


_SWALLOWER = """
from aitune_core import hookimpl

AITUNE_PLUGIN_API = 1
SWALLOWED = []


@hookimpl(wrapper=True)
def aitune_wrap_step(step):
    try:
        return (yield)
    except ValueError as error:
        SWALLOWED.append(str(error))
        return None
"""


def test_a_wrapper_cannot_swallow_the_steps_error(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = aitune_isolated_plugins.load(aitune_fake_dist("aitune-fake-swallower", _SWALLOWER))
    import aitune_fake_swallower

    def failing_build(self: Any, context: Any) -> None:
        raise ValueError("no compiler here")

    monkeypatch.setattr(TorchEagerBackend, "_build", failing_build)
    with pytest.raises(ValueError, match="no compiler here"):
        build_eager(tmp_path)
    assert aitune_fake_swallower.SWALLOWED == ["no compiler here"]
    [swallower] = [r for r in registry.records() if r.distribution == "aitune-fake-swallower"]
    assert swallower.status is PluginStatus.LOADED, "handling the error is allowed, and changes nothing"


_OLD_STYLE = """
from aitune_core import hookimpl

AITUNE_PLUGIN_API = 1
SEEN = []
RAISE = False


@hookimpl(hookwrapper=True)
def aitune_wrap_step(step):
    outcome = yield
    SEEN.append((step, outcome.exception))
    if RAISE:
        raise RuntimeError("old-style teardown is broken")
"""


def test_old_style_wrappers_are_guarded_too(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, tmp_path: Path
) -> None:
    registry = aitune_isolated_plugins.load(aitune_fake_dist("aitune-fake-old-style", _OLD_STYLE))
    import aitune_fake_old_style

    build_eager(tmp_path)
    assert aitune_fake_old_style.SEEN == [("build", None)]
    aitune_fake_old_style.RAISE = True
    with log.capture() as events:
        backend = build_eager(tmp_path)
    assert backend.state is BackendState.ACTIVE, "the step's outcome stands"
    [error] = [e for e in events if e["log_level"] == "error"]
    assert error["error"] == "RuntimeError: old-style teardown is broken"
    assert [r.status for r in registry.records()] == [PluginStatus.LOADED, PluginStatus.FAILED]


_OBJECT_PLUGIN = """
from aitune_core import hookimpl


class Observer:
    AITUNE_PLUGIN_API = 1

    def __init__(self):
        self.steps = []

    @hookimpl
    def aitune_before_step(self, step):
        self.steps.append(("before", step))

    @hookimpl(trylast=True)
    def aitune_after_step(self, backend, error):
        self.steps.append(("after", backend.name, error))


PLUGIN = Observer()
"""


def test_a_plugin_object_keeps_its_methods_arguments(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, tmp_path: Path
) -> None:
    """pluggy passes each method just the arguments it names, through the guard as without it."""
    dist = aitune_fake_dist(
        "aitune-fake-object",
        _OBJECT_PLUGIN,
        module="aitune_fake_object",
        entry_points={"observer": "aitune_fake_object:PLUGIN"},
    )
    aitune_isolated_plugins.load(dist)
    import aitune_fake_object

    build_eager(tmp_path)
    assert aitune_fake_object.PLUGIN.steps == [("before", "build"), ("after", "eager", None)]


def test_graph_key_parts_are_ordered_by_plugin_whatever_pluggys_order(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, unique_name: Callable[[str], str]
) -> None:
    source = """
from aitune_core import hookimpl

AITUNE_PLUGIN_API = 1


@hookimpl({options})
def aitune_graph_key_parts():
    return "{name}"
"""
    aitune_isolated_plugins.load(
        aitune_fake_dist("aitune-fake-p1", source.format(name="p1", options="")),
        aitune_fake_dist("aitune-fake-p2", source.format(name="p2", options="tryfirst=True")),
    )
    wrapped = aitune_core.Module(torch.nn.Linear(2, 2), unique_name("parts"))
    wrapped(torch.randn(1, 2))
    assert wrapped.graph_specs[0].key[-1] == (
        "plugin",
        (("aitune-fake-p1:aitune_fake_p1", "p1"), ("aitune-fake-p2:aitune_fake_p2", "p2")),
    )
