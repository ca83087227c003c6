"""A plugin that declares which plain tensors its key part reads is not asked for ``model(x)`` it cannot key.

The test plugin keys a call by ``MODE`` wherever it reads a plain tensor: under the
names it declares (``READS``), or under any name when its declaration is not a tuple of names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from module_helpers import FrozenBackend, tune_frozen
from torch import nn

import aitune_core as ait

PLUGIN_SOURCE = """
import torch

from aitune_core.plugins import hookimpl

AITUNE_PLUGIN_API = 1
READS = ("scale",)
MODE = None
ASKED = []


@hookimpl
def aitune_graph_key_parts(arguments):
    ASKED.append(tuple(arguments))
    read = [value for name, value in arguments.items() if not isinstance(READS, tuple) or name in READS]
    return MODE if any(type(value) is torch.Tensor for value in read) else None


@hookimpl
def aitune_graph_key_reads():
    return READS
"""


class ByX(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class ByScale(nn.Module):
    def forward(self, scale: torch.Tensor) -> torch.Tensor:
        return scale * 3


def load(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any, reads: Any) -> Any:
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-test-key-reads", source=PLUGIN_SOURCE))
    import aitune_test_key_reads as plugin

    plugin.READS = reads
    return plugin


def tuned(model: nn.Module, name: str) -> tuple[ait.Module, FrozenBackend]:
    module = ait.Module(model.eval(), name)
    tune_frozen(module, batch_sizes=[1, 4])
    (backend,) = module.backends.values()
    assert isinstance(backend, FrozenBackend)
    return module, backend


def test_a_lone_tensor_the_plugin_declares_it_never_reads_skips_its_hook(
    aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any, unique_name: Callable[[str], str]
) -> None:
    plugin = load(aitune_fake_dist, aitune_isolated_plugins, ("scale",))
    module, backend = tuned(ByX(), unique_name("reads-x"))
    plugin.ASKED.clear()
    before = backend.calls
    x = torch.randn(2, 8)
    for _ in range(3):
        assert torch.equal(module(x), x * 2)
    assert backend.calls == before + 3
    assert plugin.ASKED == [], "the lane asked a plugin that declared it never keys a lone tensor named x"


def test_a_lone_tensor_under_a_declared_name_is_still_keyed_apart(
    aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any, unique_name: Callable[[str], str]
) -> None:
    plugin = load(aitune_fake_dist, aitune_isolated_plugins, ("scale",))
    module, backend = tuned(ByScale(), unique_name("reads-scale"))
    x = torch.randn(2, 8)
    module(x)
    plugin.ASKED.clear()
    before = backend.calls
    assert torch.equal(module(x), x * 3)
    assert backend.calls == before + 1 and plugin.ASKED == [("scale",)]
    plugin.MODE = "apart"  # the plugin now keys the call: its graph was never tuned, so eager runs it
    assert torch.equal(module(x), x * 3)
    assert backend.calls == before + 1


@pytest.mark.parametrize("reads", [None, "scale"], ids=["declares-nothing", "not-a-collection-of-names"])
def test_a_plugin_that_declares_nothing_is_asked_on_every_call(
    reads: Any,
    aitune_fake_dist: Callable[..., Any],
    aitune_isolated_plugins: Any,
    unique_name: Callable[[str], str],
) -> None:
    plugin = load(aitune_fake_dist, aitune_isolated_plugins, reads)
    module, backend = tuned(ByX(), unique_name("reads-nothing"))
    x = torch.randn(2, 8)
    module(x)
    plugin.ASKED.clear()
    before = backend.calls
    module(x)
    module(x)
    assert backend.calls == before + 2 and plugin.ASKED == [("x",), ("x",)]
    plugin.MODE = "apart"
    assert torch.equal(module(x), x * 2)
    assert backend.calls == before + 2, "a call the plugin keys apart reached the lone tensor's backend"
