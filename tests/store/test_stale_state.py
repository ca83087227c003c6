"""A stored build for another state of the module than its weights fails validation, and is built again.

The store's key holds the weights' values, not what else a forward reads: PEFT's active
adapter, or here a plain attribute. A backend that bakes that in (as an exported graph
bakes in which adapter's tensors it reads) is stored for one state and found for the
other; validation against eager refuses it, and the candidate is built again instead of
losing to eager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from store_helpers import FAST, SIZES, rows, samples
from torch import nn

import aitune_core as ait
from aitune_core.log import capture
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins

FROZEN_SOURCE = """
import json
from pathlib import Path

import attrs

from aitune_core import hookimpl
from aitune_core.backends import Backend, BackendConfig

AITUNE_PLUGIN_API = 1
BUILDS = []


@attrs.frozen
class FrozenSignConfig(BackendConfig):
    pass


class FrozenSignBackend(Backend):
    name = "test_frozen_sign"
    config_class = FrozenSignConfig

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.file = None
        self.sign = None

    def _build(self, context):
        BUILDS.append(context.module_name)
        self.file = context.cache_dir / "sign.json"
        self.file.write_text(json.dumps(context.module.sign))
        self._activate()

    def _activate(self):
        self.sign = json.loads(self.file.read_text())

    def _deactivate(self):
        self.sign = None

    def _infer(self, x):
        return self.context.module.linear(x) * self.sign

    def _artifacts(self):
        return {"sign": self.file} if self.file is not None else {}

    def _restore(self, artifacts, extra):
        self.file = Path(artifacts["sign"])


@hookimpl
def aitune_register_backends():
    return [FrozenSignBackend]
"""


@pytest.fixture
def plugin(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> Any:
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-test-frozen-sign", source=FROZEN_SOURCE, version="1.0"))
    import aitune_test_frozen_sign

    aitune_test_frozen_sign.BUILDS.clear()
    return aitune_test_frozen_sign


class Signed(nn.Module):
    """The same weights every time; the sign is state that is not a tensor."""

    def __init__(self, sign: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(8, 4)
        self.sign = sign

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.sign


def tune_signed(plugin: Any, name: str, sign: int) -> tuple[ait.Module, Any, list[dict[str, Any]]]:
    wrapped = ait.Module(Signed(sign).eval(), name)
    strategy = ait.MaxThroughputStrategy([plugin.FrozenSignBackend()], profile=FAST)
    with capture() as events:
        report = ait.tune(wrapped, samples(), batch_sizes=SIZES, strategy=strategy)
    (row,) = rows(report)
    x = torch.randn(4, 8)
    torch.testing.assert_close(wrapped(x), wrapped.module(x), rtol=0, atol=0)
    return wrapped, row, [e for e in events if e["event"] == "stored build refused; building it again"]


def test_a_stored_build_that_fails_validation_is_refused_and_built_again(
    plugin: Any, unique_name: Callable[[str], str]
) -> None:
    _, row, refused = tune_signed(plugin, unique_name("plus"), 1)
    assert not row.reused and row.status == "selected" and not refused

    _, row, refused = tune_signed(plugin, unique_name("minus"), -1)  # same weights, same key, the other sign

    assert len(refused) == 1 and "fails validation here" in refused[0]["reason"]
    assert row.status == "selected" and not row.reused and len(plugin.BUILDS) == 2, row.reason
    _, row, refused = tune_signed(plugin, unique_name("minus-again"), -1)  # the rebuild was stored in its place
    assert row.reused and row.status == "selected" and not refused and len(plugin.BUILDS) == 2
