"""The plugin declares the one plain tensor its phase reads: a tuned ``model(x)`` never asks it for a part.

That a language model's calls are still keyed by phase is shown in ``test_caches.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.testing.timing import FAST_PROFILE
from aitune_transformers import plugin
from aitune_transformers.phase import DECODE

pytest.importorskip("transformers")


def test_a_tuned_lone_tensor_call_never_asks_the_phase(monkeypatch: pytest.MonkeyPatch, unique_name: Any) -> None:
    asked: list[dict[str, Any]] = []
    real = plugin.phase

    def counted(arguments: dict[str, Any], classes: tuple[type, ...]) -> str | None:
        asked.append(arguments)
        return real(arguments, classes)

    monkeypatch.setattr(plugin, "phase", counted)
    module = ait.Module(nn.Linear(8, 8).eval(), unique_name())
    strategy = ait.OneBackendStrategy(ait.TorchEagerBackend(), profile=FAST_PROFILE)
    strategy.enable_performance_validation(False)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=[1, 4], strategy=strategy)
    assert asked, "recording keys every call, through the plugin"
    x = torch.randn(1, 8)
    module(x)
    asked.clear()
    for _ in range(3):
        assert torch.equal(module(x), module.module(x))
    assert asked == []


def test_the_declaration_holds_for_every_lone_tensor_but_the_position() -> None:
    reads = plugin.aitune_graph_key_reads()
    assert list(reads) == ["cache_position"]
    for name in ("input_ids", "x", "past_key_values", "use_cache", "kwargs"):
        assert plugin.aitune_graph_key_parts({name: torch.tensor([5])}) is None
    assert plugin.aitune_graph_key_parts({"cache_position": torch.tensor([5])}) == DECODE  # keyed by phase
