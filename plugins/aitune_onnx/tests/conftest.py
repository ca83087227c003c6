"""Fixtures of the plugin's tests: small models, recorded the way tune() records them.

Exports cost about half a second each on a small CPU, so graphs are recorded once per
module and backends are built once per module where the tests allow.
"""

from __future__ import annotations

import itertools
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


class TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Tagger(torch.nn.Module):
    """Token features with a dynamic sequence length next to the batch axis, and a mask."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(tokens)) * mask.unsqueeze(-1)


class Nested(torch.nn.Module):
    """Tuple and dict inputs, a flag baked in, and nested outputs; ``pairs`` holds two rows per sample."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(
        self, values: tuple[torch.Tensor, dict[str, torch.Tensor]], scale: float = 1.0, double: bool = False
    ) -> dict[str, Any]:
        x, extra = values
        hidden = torch.relu(self.proj(x)) * scale
        pairs = extra["pairs"].view(x.shape[0], 2, -1).sum(dim=1)
        if double:
            pairs = pairs * 2
        return {"hidden": hidden, "extra": (pairs, hidden.mean(dim=1)), "tag": "nested"}


class Positive(torch.nn.Module):
    """Data-dependent output size: the indices of the positive entries."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.nonzero(x > 0), x * 2


def record(
    model: torch.nn.Module,
    make_inputs: Callable[[int], tuple[tuple[Any, ...], dict[str, Any]]],
    batch_sizes: tuple[int, ...],
    cache_dir: Path,
) -> BuildContext:
    """Record ``model`` as tune() does, and return the build context of its (only) graph.

    ``make_inputs(batch)`` returns ``(args, kwargs)`` for one call.
    """
    model.eval()
    wrapped = Module(model, f"onnx-test-{next(_names)}")
    with torch.no_grad():
        for batch_size in batch_sizes:
            args, kwargs = make_inputs(batch_size)
            with global_context:
                global_context.set(BATCH_SIZE_KEY, batch_size)
                wrapped(*args, **kwargs)
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


class Helpers:
    """What test modules share; a fixture, because test modules cannot import conftest."""

    TinyMLP = TinyMLP
    Tagger = Tagger
    Nested = Nested
    Positive = Positive
    record = staticmethod(record)
    at_shape = staticmethod(at_shape)


@pytest.fixture(scope="session")
def helpers() -> type[Helpers]:
    return Helpers


def _tagger_inputs(batch: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    length = {2: 3, 4: 9, 8: 5}[batch]
    return (torch.randn(batch, length, 8), (torch.rand(batch, length) > 0.3).float()), {}


def _nested_inputs(batch: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return ((torch.randn(batch, 8), {"pairs": torch.randn(2 * batch, 3)}),), {"double": True}


@pytest.fixture(scope="module")
def mlp_context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    torch.manual_seed(0)
    return record(TinyMLP(), lambda b: ((torch.randn(b, 8),), {}), (2, 4, 8), tmp_path_factory.mktemp("mlp"))


@pytest.fixture(scope="module")
def tagger_context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    torch.manual_seed(0)
    return record(Tagger(), _tagger_inputs, (2, 4, 8), tmp_path_factory.mktemp("tagger"))


@pytest.fixture(scope="module")
def nested_context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    torch.manual_seed(0)
    return record(Nested(), _nested_inputs, (2, 4, 8), tmp_path_factory.mktemp("nested"))


@pytest.fixture(scope="module")
def positive_context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    torch.manual_seed(0)
    return record(Positive(), lambda b: ((torch.randn(b, 5),), {}), (2, 4, 8), tmp_path_factory.mktemp("positive"))


@pytest.fixture(autouse=True)
def _failed_loads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every load that fails in these tests must leave the model exactly as it was."""
    from aitune_core.testing.load_guard import guard_failed_loads

    return guard_failed_loads(monkeypatch)
