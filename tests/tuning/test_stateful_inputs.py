"""Inputs that a call changes: stored samples and replays are copies, and a failure is a row, not an exception.

A decoder's KV cache grows with every step, and the object holding it is passed in and
out of the forward. These tests use a small stand-in, a ``Memory`` object the forward
appends to, which aitune cannot look into unless it is registered as a container.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch import nn
from tuning_helpers import FAST_PROFILE, NoDelayBackend

import aitune_core as ait
from aitune_core.backends import TorchEagerBackend
from aitune_core.config import config
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.log import capture
from aitune_core.metadata.containers import CONTAINERS, register_container
from aitune_core.profiling.timer import WallClock
from aitune_core.strategies import MaxThroughputStrategy
from aitune_core.validation.inputs import as_call


class Memory:
    """What a cache looks like to aitune: an object whose tensors a call replaces."""

    def __init__(self, state: torch.Tensor) -> None:
        self.state = state

    def __len__(self) -> int:
        return int(self.state.shape[1])


class Remembering(nn.Module):
    """Appends its input to ``memory`` and answers from all it remembers, as attention over a cache does."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, Memory]:
        memory.state = torch.cat([memory.state, self.proj(x)[:, None]], dim=1)
        return memory.state.sum(dim=1), memory


def steps(module: Any, batch: torch.Tensor, count: int = 3) -> torch.Tensor:
    memory = Memory(torch.zeros(batch.shape[0], 1, 4))
    out = batch
    for _ in range(count):
        out, memory = module(out, memory)
    return out


@pytest.fixture
def memory_container() -> Any:
    def flatten(memory: Memory) -> Sequence[tuple[str, Any]]:
        return [("state", memory.state)]

    def unflatten(memory: Memory, children: Sequence[Any]) -> Memory:
        return Memory(children[0])

    register_container(Memory, flatten, unflatten)
    yield
    CONTAINERS.unregister(Memory)


def data() -> list[torch.Tensor]:
    return [torch.randn(4) for _ in range(4)]


def test_stored_samples_keep_the_state_they_were_recorded_with(unique_name):
    module = ait.Module(Remembering().eval(), unique_name())
    strategy = MaxThroughputStrategy([TorchEagerBackend()], profile=FAST_PROFILE)
    ait.tune(lambda x: steps(module, x), data(), batch_sizes=[1, 2], strategy=strategy)
    lengths = sorted(
        {len(sample.arguments["memory"]) for record in module.graphs.values() for sample in record.samples}
    )
    # Calls were made with memories of 1, 2 and 3 steps; later calls must not have grown them.
    assert lengths == [1, 2, 3]


def test_an_object_aitune_cannot_look_into_is_named_with_the_fix(unique_name):
    module = ait.Module(Remembering().eval(), unique_name())
    strategy = MaxThroughputStrategy([TorchEagerBackend()], profile=FAST_PROFILE)
    report = ait.tune(lambda x: steps(module, x), data(), batch_sizes=[1, 2], strategy=strategy)
    reasons = [row.reason for graph in report.graphs for row in graph.candidates if row.status == "rejected"]
    assert reasons, "an output holding an opaque object must not pass validation unseen"
    for reason in reasons:
        assert "is a Memory, which aitune cannot look into" in reason
        assert "register" in reason and "use_cache=False" in reason
        assert "eager gives Memory" not in reason


def test_a_registered_state_object_tunes_and_every_replay_gets_a_copy(unique_name, memory_container):
    model = Remembering().eval()
    module = ait.Module(model, unique_name())
    strategy = MaxThroughputStrategy([NoDelayBackend()], profile=FAST_PROFILE)
    report = ait.tune(lambda x: steps(module, x), data(), batch_sizes=[1, 2], strategy=strategy)
    rows = [row for graph in report.graphs for row in graph.candidates]
    # Validation replays each point twice and profiling times many calls: shared inputs
    # would have grown the memory between them and failed the candidate.
    assert rows and all(row.status == "selected" for row in rows), [(r.status, r.reason) for r in rows]
    batch = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(steps(module, batch), steps(model, batch))


class BatchBound(nn.Module):
    """Fails when its input's batch differs from its state's, as a cache concatenation does."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, memory: Memory) -> torch.Tensor:
        return torch.cat([memory.state, self.proj(x)[:, None]], dim=1).sum(dim=1)


def test_a_batch_search_that_eager_cannot_run_is_skipped_with_the_reason(unique_name):
    config.timer = WallClock()  # the search must really call the model; no verdict here depends on times
    module = ait.Module(BatchBound().eval(), unique_name())

    def run(x: torch.Tensor) -> torch.Tensor:
        return module(x, Memory(torch.zeros(x.shape[0], 2, 4)))

    strategy = MaxThroughputStrategy([TorchEagerBackend()], profile=FAST_PROFILE)
    with capture() as logs:
        report = ait.tune(run, data(), batch_sizes=[1, 2], strategy=strategy)
    skipped = [event for event in logs if event["event"] == "batch search skipped"]
    assert len(skipped) == 1 and "eager raised RuntimeError at batch" in skipped[0]["reason"]
    assert report.graphs and module.backends


class Exploding(nn.Module):
    """Runs on what was recorded, and raises on anything else (a batch it was not given)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.recording = True
        self.seen: set[int] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recording:
            self.seen.add(x.shape[0])
        elif x.shape[0] not in self.seen:
            raise RuntimeError(f"cannot run batch {x.shape[0]}")
        return self.proj(x)


def test_a_graph_whose_tuning_raises_stays_eager_and_the_others_keep_their_routes(unique_name, monkeypatch):
    good = ait.Module(nn.Linear(4, 4).eval(), unique_name("good"))
    model = Exploding().eval()
    bad = ait.Module(model, unique_name("bad"))
    strategy = MaxThroughputStrategy([NoDelayBackend()], profile=FAST_PROFILE)
    original_tune = MaxThroughputStrategy._tune

    def failing_tune(self: MaxThroughputStrategy, run: Any) -> Any:
        if run.session.module is model:
            raise RuntimeError("eager raised on a generated input")
        return original_tune(self, run)

    monkeypatch.setattr(MaxThroughputStrategy, "_tune", failing_tune)
    report = ait.tune(lambda x: bad(good(x)), data(), batch_sizes=[1, 2], strategy=strategy)
    by_module = {graph.module: graph for graph in report.graphs}
    assert by_module[good.name].selected is not None and by_module[good.name].selected.backend == "NoDelayBackend()"
    failed = by_module[bad.name].selected
    assert failed is not None and failed.status == "fallback"
    assert "tuning this graph raised RuntimeError: eager raised on a generated input" in failed.reason
    assert isinstance(bad.backends["0"], TorchEagerBackend)


def test_every_timed_call_gets_its_own_copy_of_a_state_object(memory_container):
    seen: list[int] = []

    def grow(x: torch.Tensor, memory: Memory) -> torch.Tensor:
        seen.append(len(memory))
        memory.state = torch.cat([memory.state, x[:, None]], dim=1)
        return x

    signature = ForwardSignature(grow)
    call = as_call(
        "batch 1", {"x": torch.ones(1, 4), "memory": Memory(torch.zeros(1, 2, 4))}, signature, torch.device("cpu")
    )
    timer = WallClock()
    timer.warm("eager", grow, call, 2)
    timer.time("eager", grow, call, 1, 5)
    assert seen == [2] * 7
    plain = as_call("batch 1", {"x": torch.ones(1, 4)}, ForwardSignature(lambda x: x), torch.device("cpu"))
    assert plain.fresh is None  # tensors and plain values are not copied per call
