"""The JIT backend: one dynamic graph for the tuned range, reports, and lifecycle without global resets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import BuildContext
from aitune_core.testing.models import mlp_call
from aitune_core.testing.recording import at_shape, record
from aitune_inductor import TorchInductorJitBackend

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(mlp_context: BuildContext) -> Iterator[TorchInductorJitBackend]:
    backend = TorchInductorJitBackend().build(mlp_context)
    yield backend
    backend.deactivate()


def test_builds_one_dynamic_graph(built: TorchInductorJitBackend) -> None:
    info = built.build_info
    assert info["dynamic"] == "None"
    assert info["marked_dynamic"] == ["x[0] in [2, 8]"]
    assert info["graph_breaks"] == 0 and info["break_reasons"] == []
    assert info["graphs"] == 1
    assert info["recompiles"] == 0, "samples, min and max shapes must all hit the first (dynamic) graph"


@pytest.mark.parametrize("which", ["min", "opt", "max"])
def test_matches_eager_at_shape(built: TorchInductorJitBackend, mlp_context: BuildContext, which: str) -> None:
    args, kwargs = at_shape(mlp_context, which)
    with torch.no_grad():
        torch.testing.assert_close(built(*args, **kwargs), mlp_context.module(*args, **kwargs))


class Widening(torch.nn.Module):
    """A graph no other test compiles: a cached compile of the same graph with a range from 2
    would bring its guard back (see aitune_inductor.size_one)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 24)
        self.down = torch.nn.Linear(24, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


def test_batch_sizes_from_one_build_one_graph(tmp_path: Any) -> None:
    """Batch 1 is special to Dynamo (0/1 specialisation); it must still share the one graph."""
    context = record(Widening(), mlp_call, (1, 2, 4, 8), tmp_path)
    backend = TorchInductorJitBackend().build(context)
    info = backend.build_info
    assert info["marked_dynamic"] == ["x[0] in [1, 8]"]
    assert info["size_one"] == "shared", info
    assert info["graphs"] == 1, info
    assert info["recompiles"] == 0, info
    x = torch.randn(1, 8)
    with torch.no_grad():
        torch.testing.assert_close(backend(x), context.module(x))


class SqueezesBatch(torch.nn.Module):
    """``squeeze()`` drops a batch of 1 in eager, so the softmax runs over the features;
    a size-oblivious graph keeps the axis and takes the softmax over the batch instead."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).squeeze().softmax(0).reshape(x.shape[0], -1)


def test_size_one_gets_its_own_graph_where_sharing_changes_the_output(tmp_path: Any) -> None:
    context = record(SqueezesBatch(), mlp_call, (1, 4), tmp_path)
    backend = TorchInductorJitBackend().build(context)
    assert backend.build_info["size_one"].startswith("own graph: "), backend.build_info
    assert backend.build_info["marked_dynamic"] == ["x[0] in [2, 4]"]
    for batch in (1, 3):
        x = torch.randn(batch, 8)
        with torch.no_grad():
            torch.testing.assert_close(backend(x), context.module(x))


def test_new_batch_size_in_range_does_not_recompile(built: TorchInductorJitBackend, mlp_context: BuildContext) -> None:
    before = built.compile_stats()
    x = torch.randn(5, 8)  # batch 5 was never recorded nor built
    with torch.no_grad():
        expected = mlp_context.module(x)
    torch.testing.assert_close(built(x), expected)  # with grad enabled: the backend must not recompile for it
    after = built.compile_stats()
    assert after["recompiles"] == before["recompiles"]
    assert after["graphs"] == before["graphs"]


def test_deactivate_releases_without_global_reset(mlp_context: BuildContext, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._dynamo

    def forbidden() -> None:
        raise AssertionError("a backend must not reset Dynamo for the whole process")

    monkeypatch.setattr(torch._dynamo, "reset", forbidden)
    backend = TorchInductorJitBackend().build(mlp_context)
    backend.deactivate()
    assert backend._compiled is None
    backend.activate(mlp_context)
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(backend(x), mlp_context.module(x))


class Breaking(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.proj(x)
        torch._dynamo.graph_break()
        return torch.relu(hidden)


def test_graph_breaks_are_reported_and_fullgraph_refuses_them(tmp_path: Any) -> None:
    context = record(Breaking(), mlp_call, (2, 4), tmp_path)
    with pytest.raises(Exception, match=r"(?i)graph.break"):
        TorchInductorJitBackend(fullgraph=True).build(context)
    backend = TorchInductorJitBackend().build(context)
    assert backend.build_info["graph_breaks"] >= 1
    assert backend.build_info["graphs"] == 2
    assert backend.build_info["break_reasons"]
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(backend(x), context.module(x))


def test_autocast_outputs_keep_eager_dtypes(mlp_context: BuildContext) -> None:
    backend = TorchInductorJitBackend(autocast_enabled=True, autocast_dtype=torch.bfloat16).build(mlp_context)
    x = torch.randn(6, 8)
    out = backend(x)
    assert out.dtype == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(out, mlp_context.module(x), rtol=5e-2, atol=5e-2)


class BranchesOnBatch(torch.nn.Module):
    """Specialises on the batch size, which contradicts bounds of [2, 8] for it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] >= 4:
            return torch.relu(self.proj(x))
        return self.proj(x)


def test_bounds_the_model_contradicts_are_dropped(tmp_path: Any) -> None:
    context = record(BranchesOnBatch(), mlp_call, (2, 4, 8), tmp_path)
    backend = TorchInductorJitBackend().build(context)
    assert "Constraint" in backend.build_info["bounds_dropped"]
    for which in ("min", "opt", "max"):
        args, kwargs = at_shape(context, which)
        with torch.no_grad():
            torch.testing.assert_close(backend(*args, **kwargs), context.module(*args, **kwargs))
