"""The lossless and the lossy candidates of a module, tuned apart, and what the lossy ones would save.

Under a budget, a strategy's candidates are split by their own declaration
(``Backend.lossy``): the lossless ones are tuned first, exactly as without a budget,
and the lossy ones (torchao presets, autocast, reduced precisions) then compete among
themselves and with eager on each graph. Tensor tolerances do not judge them: the
user's metric does, so they are only checked for outputs of the right structure and
finite values. A module has an :class:`~aitune_core.accuracy.search.Option` when, on
some graph, its lossy winner beats its lossless winner by the strategy's gate.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Hashable
from typing import Any

import attrs
import torch

from aitune_core.accuracy.search import Option
from aitune_core.backends.base import Backend
from aitune_core.backends.tolerances import Tolerances
from aitune_core.config import config
from aitune_core.executors.base import Executor
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.guard import ModuleGuard
from aitune_core.module.router import Route
from aitune_core.module.wrapper import Module
from aitune_core.reporting.summary import GraphReport
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.defaults import default_backends
from aitune_core.strategies.graph_run import run_graph
from aitune_core.strategies.request import GraphTuneRequest

UNBOUNDED = Tolerances.uniform(math.inf, math.inf)
"""Lossy candidates are judged by the metric: only the outputs' structure and finiteness are checked."""


def offered_backends(strategy: TuneStrategy, device: torch.device) -> list[Backend]:
    """The strategy's candidates, lossy defaults included: the ones it names, else every plugin default."""
    if strategy.backends is not None:
        return list(strategy.backends)
    return [backend for backend, _ in default_backends(device, True)]


def lossless_strategy(strategy: TuneStrategy, device: torch.device) -> TuneStrategy:
    """``strategy`` without its lossy candidates; itself where it has none (tuning exactly as without a budget)."""
    if strategy.backends is None and not strategy.allows_lossy():
        return strategy
    exact = copy.copy(strategy)
    exact.backends = [b for b in offered_backends(strategy, device) if not b.lossy]
    return exact


def lossy_strategy(strategy: TuneStrategy, device: torch.device) -> TuneStrategy | None:
    """``strategy`` with only its lossy candidates, judged by the metric; None where it offers none."""
    lossy = [b for b in offered_backends(strategy, device) if b.lossy]
    if not lossy:
        return None
    trial = copy.copy(strategy)
    trial.backends = lossy
    trial.tolerances = UNBOUNDED
    return trial


@attrs.define(eq=False)
class LossyGraph:
    """A graph's lossy route and how its lossy and lossless winners compare (seconds per call)."""

    key: Hashable
    graph: str
    route: Route
    report: GraphReport
    lossless_s: float | None
    lossy_s: float | None

    @property
    def faster(self) -> bool:
        return self.lossless_s is not None and self.lossy_s is not None and self.lossy_s < self.lossless_s

    @property
    def lossy_backends(self) -> list[Backend]:
        return [b for b in self.route.backends if b.lossy]


def tune_lossy(
    module: Module,
    strategy: TuneStrategy,
    device: torch.device,
    executor: Executor,
    specs: dict[Hashable, GraphSpec],
    lossless: list[GraphReport],
    log: Any,
) -> list[LossyGraph]:
    """Tune each graph of ``module`` on its lossy candidates; the lossless reports give what they must beat."""
    guard = ModuleGuard(module.module, module.name, log=log)
    graphs: list[LossyGraph] = []
    try:
        for record in module.graphs.values():
            graph = specs.get(record.spec.key, record.spec)
            cache_dir = config.cache_dir / module.name / graph.name
            request = GraphTuneRequest(
                module.module, module.name, graph, record.samples, device, cache_dir, module.signature, guard
            )
            run, report = run_graph(strategy, request, executor, log)
            assert run.backend is not None, "a run ends with a backend, tuned or eager"
            route = Route(graph, run.backend, run.lower)
            exact = next((r for r in lossless if r.module == module.name and r.graph == graph.name), None)
            gate = strategy.performance_gate
            eager_s = eager_seconds(report)
            lossy_s = eager_s / speedup(report) if eager_s is not None else None
            lossless_s = eager_s / speedup(exact) if eager_s is not None and exact is not None else None
            if lossy_s is not None and lossless_s is not None and lossy_s * gate >= lossless_s:
                lossy_s = None  # not faster than the lossless winner by the gate: nothing to gain
            graphs.append(LossyGraph(record.spec.key, graph.name, route, report, lossless_s, lossy_s))
    finally:
        guard.release()
    return graphs


def eager_seconds(report: GraphReport) -> float | None:
    """Eager's seconds per call at the graph's largest compared batch; None when nothing was compared."""
    batch = report.shown_batch
    eager = next((m for m in report.eager_sweep if m.batch_size == batch), None)
    return eager.median_ms / 1e3 if eager is not None else None


def speedup(report: GraphReport) -> float:
    """How much faster than eager what serves the graph's largest batches is; 1.0 where eager serves.

    Taken at the largest batch compared, or the largest the winner was compared at when the
    two runs compared different sizes.
    """
    selected = report.selected
    if selected is None or selected.status == "fallback" or not selected.speedups:
        return 1.0
    batch = report.shown_batch
    measured = selected.speedups.get(batch) if batch is not None else None
    if measured is None:
        measured = selected.speedups[max(selected.speedups)]
    return measured.median if measured.median > 0 else 1.0


def seconds(report: GraphReport) -> float | None:
    """Seconds per call of what serves the graph's largest compared batch; None when it was not timed."""
    eager = eager_seconds(report)
    return eager / speedup(report) if eager is not None else None


def option(module: str, graphs: list[LossyGraph]) -> Option | None:
    """The module's lossy option: its graphs whose lossy winner is lossy and faster; None where none is."""
    useful = [g for g in graphs if g.faster and g.lossy_backends]
    if not useful:
        return None
    names = tuple(dict.fromkeys(b.describe() for g in useful for b in g.lossy_backends))
    lossless = sum(g.lossless_s or 0.0 for g in useful)
    lossy = sum(g.lossy_s or 0.0 for g in useful)
    return Option(module, lossless, lossy, names)


def release(graphs: list[LossyGraph], keep: set[int]) -> None:
    """Deactivate the lossy routes' backends that do not serve (``keep``: ids of those that do)."""
    for graph in graphs:
        for backend in graph.route.backends:
            if id(backend) not in keep and backend.state.name == "ACTIVE":
                backend.deactivate()
