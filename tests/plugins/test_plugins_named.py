"""Backends and executors follow one naming policy, checked while plugins load, and refuse the plugin alike."""

from __future__ import annotations

from typing import Any

import pytest

from aitune_core import log
from aitune_core.executors import executor_names
from aitune_core.plugins import PluginStatus
from aitune_core.plugins.registry import PluginRegistry

_EXECUTORS = """
import abc

from aitune_core import hookimpl
from aitune_core.executors import Executor, InProcessExecutor

AITUNE_PLUGIN_API = 1
CALLS = []


class {cls}(InProcessExecutor):
    name = {name!r}


class Unfinished(Executor):
    name = "unfinished"


class NotAnExecutor:
    name = "plain"


@hookimpl
def aitune_register_executors():
    CALLS.append("aitune_register_executors")
    return {returned}
"""

_BACKENDS = """
from aitune_core import hookimpl
from aitune_core.backends import TorchEagerBackend

AITUNE_PLUGIN_API = 1


class {cls}(TorchEagerBackend):
    name = {name!r}


@hookimpl
def aitune_register_backends():
    return [{cls}]
"""


def executors_plugin(dist: Any, distribution: str, name: str, returned: str = "[Chosen]") -> Any:
    return dist(distribution, _EXECUTORS.format(cls="Chosen", name=name, returned=returned))


def reasons(registry: PluginRegistry) -> dict[str, tuple[PluginStatus, str]]:
    return {r.distribution: (r.status, r.reason) for r in registry.records() if not r.builtin}


def test_executors_are_registered_once_while_loading(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    registry = aitune_isolated_plugins.load(executors_plugin(aitune_fake_dist, "aitune-fake-near", "near"))
    import aitune_fake_near

    assert executor_names() == ["auto", "inprocess", "near", "subprocess"]
    assert registry.executor_classes() == {"near": aitune_fake_near.Chosen}
    assert executor_names() == ["auto", "inprocess", "near", "subprocess"]
    assert aitune_fake_near.CALLS == ["aitune_register_executors"], "asked once, at load, not per lookup"


@pytest.mark.parametrize(
    ("returned", "reason"),
    [
        ("[NotAnExecutor]", "aitune_register_executors returned <class 'aitune_fake_odd.NotAnExecutor'>, "),
        ("[Unfinished]", "Unfinished is abstract (missing submit)"),
        ("Chosen", "aitune_register_executors must return a list of Executor classes"),
        ("[Chosen, Chosen]", "it registers the executor name 'odd' twice"),
    ],
)
def test_an_invalid_executor_refuses_its_plugin(
    returned: str, reason: str, aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    with log.capture() as events:
        registry = aitune_isolated_plugins.load(executors_plugin(aitune_fake_dist, "aitune-fake-odd", "odd", returned))
    status, found = reasons(registry)["aitune-fake-odd"]
    assert status is PluginStatus.FAILED and found.startswith(reason)
    assert executor_names() == ["auto", "inprocess", "subprocess"]
    assert [e["distribution"] for e in events if e["event"] == "plugin failed to load"] == ["aitune-fake-odd"]


def test_an_executor_name_two_plugins_register_refuses_both(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    registry = aitune_isolated_plugins.load(
        executors_plugin(aitune_fake_dist, "aitune-fake-one", "cluster"),
        executors_plugin(aitune_fake_dist, "aitune-fake-two", "cluster"),
        executors_plugin(aitune_fake_dist, "aitune-fake-three", "other"),
    )
    both = (
        "executor name 'cluster' is registered by both aitune-fake-one and aitune-fake-two; neither is loaded "
        "(disable one with AITUNE_DISABLED_PLUGINS)"
    )
    assert reasons(registry) == {
        "aitune-fake-one": (PluginStatus.FAILED, both),
        "aitune-fake-three": (PluginStatus.LOADED, ""),
        "aitune-fake-two": (PluginStatus.FAILED, both),
    }
    assert executor_names() == ["auto", "inprocess", "other", "subprocess"]


def test_backend_and_executor_names_are_refused_alike(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    """The core's names: ``eager`` through its built-in plugin, ``inprocess`` defined by the core itself."""
    registry = aitune_isolated_plugins.load(
        aitune_fake_dist("aitune-fake-eager", _BACKENDS.format(cls="Eager", name="eager")),
        executors_plugin(aitune_fake_dist, "aitune-fake-inprocess", "inprocess"),
    )
    assert reasons(registry) == {
        "aitune-fake-eager": (
            PluginStatus.FAILED,
            "backend name 'eager' is taken by the built-in plugin of aitune-core",
        ),
        "aitune-fake-inprocess": (PluginStatus.FAILED, "executor name 'inprocess' is taken by aitune-core"),
    }


def test_an_executor_hook_that_raises_refuses_the_plugin_at_load(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    source = """
from aitune_core import hookimpl

AITUNE_PLUGIN_API = 1


@hookimpl
def aitune_register_executors():
    raise RuntimeError("cluster unreachable")
"""
    registry = aitune_isolated_plugins.load(aitune_fake_dist("aitune-fake-unreachable", source))
    assert reasons(registry) == {
        "aitune-fake-unreachable": (PluginStatus.FAILED, "registration failed: RuntimeError: cluster unreachable")
    }
