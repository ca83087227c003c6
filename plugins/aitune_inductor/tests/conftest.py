"""Fixtures of the plugin's tests: one Inductor cache for the run, and recorded graphs to build.

Compiling costs seconds on a small CPU, so the tests share one Inductor cache (a
kernel compiled by one test is reused by the next) and build each backend once per
module where they can.
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


@pytest.fixture(scope="session", autouse=True)
def _shared_inductor_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One Inductor cache for the whole run, unless the caller already chose one (nox does)."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        yield
        return
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor-cache"))
    try:
        yield
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)


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


class TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class TwoInputs(torch.nn.Module):
    """Two inputs whose batch axes differ (``y`` holds two rows per sample), nested outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        hidden = torch.relu(self.proj(x))
        pairs = y.view(x.shape[0], 2, -1).sum(dim=1)
        return {"hidden": hidden, "extra": (pairs * 2, hidden.mean())}


def record(
    model: torch.nn.Module, make_inputs: Callable[[int], tuple[Any, ...]], batch_sizes: tuple[int, ...], cache_dir: Path
) -> BuildContext:
    """Record ``model`` as tune() does, and return the build context of its (only) graph."""
    model.eval()
    wrapped = Module(model, f"inductor-test-{next(_names)}")
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


def at_shape(context: BuildContext, which: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Call arguments at the graph's min, opt or max shape."""
    arguments = context.graph_spec.input_spec.make_shape(context.samples[0].arguments, which)  # type: ignore[arg-type]
    return context.signature.bind(arguments)


def env_with_sources() -> dict[str, str]:
    """The environment for a subprocess that must import the same aitune_core and aitune_inductor."""
    import aitune_core
    import aitune_inductor

    paths = {str(Path(str(module.__file__)).parents[1]) for module in (aitune_core, aitune_inductor)}
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*sorted(paths), os.environ.get("PYTHONPATH", "")])}


class Helpers:
    """What test modules share; a fixture, because test modules cannot import conftest."""

    TinyMLP = TinyMLP
    TwoInputs = TwoInputs
    record = staticmethod(record)
    at_shape = staticmethod(at_shape)
    env_with_sources = staticmethod(env_with_sources)


@pytest.fixture(scope="session")
def helpers() -> type[Helpers]:
    return Helpers


@pytest.fixture(scope="module")
def mlp_context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    torch.manual_seed(0)
    return record(TinyMLP(), lambda b: (torch.randn(b, 8),), (2, 4, 8), tmp_path_factory.mktemp("mlp"))


@pytest.fixture(scope="module")
def two_inputs_context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    torch.manual_seed(0)
    return record(
        TwoInputs(), lambda b: (torch.randn(b, 8), torch.randn(2 * b, 3)), (2, 4, 8), tmp_path_factory.mktemp("two")
    )


@pytest.fixture(autouse=True)
def _failed_loads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every load that fails in these tests must leave the model exactly as it was."""
    from aitune_core.testing.load_guard import guard_failed_loads

    return guard_failed_loads(monkeypatch)
