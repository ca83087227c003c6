"""Fixtures of the plugin's tests: a clean aitune config per test, and small recorded models.

torchao's import takes seconds, so it is imported once, here, for the whole run; the
test that checks that importing the plugin does not import torchao runs in a new
process.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_core.backends.base import BuildContext
from aitune_core.config import config
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.module.wrapper import Module
from aitune_core.testing.timing import steady_timer

_names = itertools.count()


@pytest.fixture(autouse=True)
def _default_config(tmp_path: Path) -> Iterator[None]:
    config.reset()
    config.timer = steady_timer()  # which candidate wins never depends on the machine's load
    config.cache_dir = tmp_path / "aitune-cache"
    torch.manual_seed(0)
    try:
        yield
    finally:
        config.reset()


class SmallMLP(torch.nn.Module):
    """Two Linear layers wide enough for torchao's per-row int8 kernels to matter."""

    def __init__(self, width: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.act = torch.nn.GELU()
        self.down = torch.nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


def record(
    model: torch.nn.Module, make_inputs: Callable[[int], tuple[Any, ...]], batch_sizes: tuple[int, ...], cache_dir: Path
) -> BuildContext:
    """Record ``model`` as tune() does, and return the build context of its (only) graph."""
    model.eval()
    wrapped = Module(model, f"torchao-test-{next(_names)}")
    with torch.no_grad():
        for batch_size in batch_sizes:
            with global_context:
                global_context.set(BATCH_SIZE_KEY, batch_size)
                wrapped(*make_inputs(batch_size))
    (graph,) = wrapped.graphs.values()
    return BuildContext(
        module=model,
        module_name=wrapped.name,
        graph_spec=graph.spec,
        samples=graph.samples,
        device=torch.device("cpu"),
        cache_dir=cache_dir,
        signature=wrapped.signature,
    )


def env_with_sources() -> dict[str, str]:
    """The environment for a subprocess that must import the same aitune_core and aitune_torchao."""
    import aitune_core
    import aitune_torchao

    paths = {str(Path(str(module.__file__)).parents[1]) for module in (aitune_core, aitune_torchao)}
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AITUNE_")}
    return {**environ, "PYTHONPATH": os.pathsep.join([*sorted(paths), os.environ.get("PYTHONPATH", "")])}


class Helpers:
    """What test modules share; a fixture, because test modules cannot import conftest."""

    SmallMLP = SmallMLP
    record = staticmethod(record)
    env_with_sources = staticmethod(env_with_sources)


@pytest.fixture(scope="session")
def helpers() -> type[Helpers]:
    return Helpers


@pytest.fixture
def mlp_context(tmp_path: Path) -> BuildContext:
    torch.manual_seed(0)
    return record(SmallMLP(), lambda b: (torch.randn(b, 32),), (2, 4, 8), tmp_path / "mlp")


@pytest.fixture(autouse=True)
def _failed_loads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every load that fails in these tests must leave the model exactly as it was."""
    from aitune_core.testing.load_guard import guard_failed_loads

    return guard_failed_loads(monkeypatch)
