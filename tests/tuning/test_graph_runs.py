"""One strategy instance tunes several graphs at once: each graph's run holds its own state.

Two graphs of two models are tuned by the same strategy, first one after the other,
then from two threads whose first builds wait for each other, so that both runs are
inside the strategy at the same time. The routes and the summary rows must be the
same both ways. Timings are scripted, so the verdicts do not depend on the machine.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
import torch
from torch import nn
from tuning_helpers import FAST_PROFILE, SlowableMLP

from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.module.router import Route
from aitune_core.profiling.timer import EAGER, ScriptedTimer
from aitune_core.strategies import (
    FirstWinsStrategy,
    GraphRun,
    GraphTuneRequest,
    LatencyBudgetStrategy,
    MaxThroughputStrategy,
    MinLatencyStrategy,
    OneBackendStrategy,
    TuneStrategy,
)
from aitune_core.testing.recording import record

PROFILE = attrs.evolve(FAST_PROFILE, max_batch_search=False)


@attrs.frozen
class MeetingConfig(BackendConfig):
    label: str = ""


class MeetingBackend(Backend):
    """Runs a copy of the module; while ``meeting`` is set, each thread's first build waits there for the other's."""

    name = "test_meeting"
    config_class = MeetingConfig
    meeting: ClassVar[threading.Barrier | None] = None
    _met = threading.local()

    def _build(self, context: BuildContext) -> None:
        if MeetingBackend.meeting is not None and not getattr(MeetingBackend._met, "done", False):
            MeetingBackend._met.done = True
            MeetingBackend.meeting.wait(timeout=60)
        self._module = copy.deepcopy(context.module)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self._module(*args, **kwargs)


SMALL, LARGE = MeetingBackend(label="small"), MeetingBackend(label="large")
TIMER = {
    EAGER: lambda batch: 1.0e-3 * batch,
    SMALL.describe(): lambda batch: 0.4e-3 + 0.5e-3 * batch,  # ahead of eager everywhere, of LARGE below 7
    LARGE.describe(): lambda batch: 2.0e-3 + 0.2e-3 * batch,  # behind eager below 3
}

STRATEGIES: dict[str, Callable[[ScriptedTimer], TuneStrategy]] = {
    "max_throughput": lambda timer: MaxThroughputStrategy([SMALL, LARGE], profile=PROFILE, timer=timer),
    "min_latency": lambda timer: MinLatencyStrategy([SMALL, LARGE], profile=PROFILE, timer=timer),
    "latency_budget": lambda timer: LatencyBudgetStrategy([SMALL, LARGE], budget_ms=6.0, profile=PROFILE, timer=timer),
    "first_wins": lambda timer: FirstWinsStrategy([LARGE, SMALL], profile=PROFILE, timer=timer),
    "one_backend": lambda timer: OneBackendStrategy(LARGE, profile=PROFILE, timer=timer),
}


def recorded(tmp_path: Path) -> list[BuildContext]:
    """Two graphs of two models, recorded at different batch sizes so that their routes differ."""
    torch.manual_seed(0)
    wide = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 6))
    return [
        record(SlowableMLP(), lambda batch: ((torch.randn(batch, 16),), {}), (1, 2, 4, 8), tmp_path / "mlp"),
        record(wide, lambda batch: ((torch.randn(batch, 12),), {}), (1, 16, 32), tmp_path / "wide"),
    ]


def request_of(context: BuildContext) -> GraphTuneRequest:
    return GraphTuneRequest(
        context.module,
        context.module_name,
        copy.deepcopy(context.graph_spec),
        context.samples,
        context.device,
        context.cache_dir,
        context.signature,
    )


def tune(strategy: TuneStrategy, context: BuildContext) -> GraphRun:
    with torch.no_grad():
        return strategy.tune(request_of(context))


def outcome(run: GraphRun) -> dict[str, Any]:
    """Who serves which batches, and every row of the summary."""
    graph = run.session.graph
    batch_range = graph.batch_range
    assert batch_range is not None and run.backend is not None
    route = Route(graph, run.backend, run.lower)
    ranges = [(low, high, "eager" if b is None else b.describe()) for low, high, b in route.ranges(*batch_range)]
    rows = [(row.backend, row.status, row.reason, tuple(row.serves)) for row in run.results]
    return {"ranges": ranges, "rows": rows, "eager_serves": list(run.eager_serves)}


@pytest.mark.parametrize("kind", list(STRATEGIES))
def test_two_graphs_at_once_get_the_routes_they_get_one_after_the_other(kind: str, tmp_path: Path) -> None:
    strategy = STRATEGIES[kind](ScriptedTimer(TIMER))
    contexts = recorded(tmp_path)
    alone = [outcome(tune(strategy, context)) for context in contexts]
    assert alone[0]["ranges"] != alone[1]["ranges"], "the graphs must differ for a mix-up to show"
    assert any(r[2] != "TorchEagerBackend()" for o in alone for r in o["ranges"]), "something must be tuned"

    MeetingBackend.meeting = threading.Barrier(len(contexts))
    try:
        with ThreadPoolExecutor(max_workers=len(contexts)) as pool:
            together = [outcome(run) for run in pool.map(lambda context: tune(strategy, context), contexts)]
        assert MeetingBackend.meeting.n_waiting == 0 and not MeetingBackend.meeting.broken
    finally:
        MeetingBackend.meeting = None
    assert together == alone


def test_max_throughput_routes_each_range_to_its_fastest(tmp_path: Path) -> None:
    """What the outcomes above compare: small batches to SMALL, large ones to LARGE, per graph."""
    strategy = STRATEGIES["max_throughput"](ScriptedTimer(TIMER))
    mlp, wide = (outcome(tune(strategy, context)) for context in recorded(tmp_path))
    assert mlp["ranges"] == [(1, 4, SMALL.describe()), (5, 8, LARGE.describe())]
    assert wide["ranges"] == [(1, 1, SMALL.describe()), (2, 32, LARGE.describe())]


def test_the_argument_list_of_earlier_versions_still_tunes_and_names_the_request(tmp_path: Path) -> None:
    """Code written before GraphTuneRequest calls start and tune with the graph's facts one by one: the same
    runs come out, with a warning that shows the new form."""
    strategy = STRATEGIES["max_throughput"](ScriptedTimer(TIMER))
    context = recorded(tmp_path)[0]
    expected = outcome(tune(strategy, context))
    facts = (context.module, context.module_name, copy.deepcopy(context.graph_spec), context.samples, context.device)
    with torch.no_grad():
        with pytest.warns(DeprecationWarning, match=r"strategy\.tune\(GraphTuneRequest\("):
            tuned = strategy.tune(*facts, context.cache_dir, context.signature)
        with pytest.warns(DeprecationWarning, match=r"strategy\.start\(GraphTuneRequest\("):
            started = strategy.start(*facts, cache_dir=context.cache_dir)  # the signature read from forward
        started.tune()
    assert outcome(tuned) == outcome(started) == expected


def test_a_request_comes_alone_and_the_old_form_must_fit(tmp_path: Path) -> None:
    strategy = STRATEGIES["max_throughput"](ScriptedTimer(TIMER))
    context = recorded(tmp_path)[0]
    with pytest.raises(TypeError, match=r"takes a GraphTuneRequest and nothing else"):
        strategy.start(request_of(context), context.signature)
    with pytest.raises(TypeError, match=r"TuneStrategy\.tune takes a GraphTuneRequest \(missing"):
        strategy.tune(context.module, context.module_name)
