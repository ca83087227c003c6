"""The search under an accuracy budget, once every module has its lossless routes.

``tune`` calls :func:`choose_lossy` after the lossless pass: each module's lossy
candidates are tuned, eager's outputs on the held-out data are taken as the reference,
and :func:`~aitune_core.accuracy.search.search` measures the whole pipeline with
modules lossy one at a time and then in combination, through routes tried without
being installed (:meth:`~aitune_core.module.Module.trial_routes`). What serves at the
end is each module's lossless routes, with the lossy ones of the chosen modules in
place of them; every other lossy backend is released.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from typing import Any

import attrs
import torch

from aitune_core.accuracy.budget import AccuracyBudget
from aitune_core.accuracy.candidates import LossyGraph, lossy_strategy, option, release, seconds, tune_lossy
from aitune_core.accuracy.heldout import HeldOut, Outputs, drop, run_pipeline
from aitune_core.accuracy.record import AccuracyRecord, LossyChoice
from aitune_core.accuracy.search import Option, search
from aitune_core.executors.base import Executor
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.module.router import Route
from aitune_core.module.wrapper import Module
from aitune_core.profiling.budget import ProfilingBudget
from aitune_core.reporting.accuracy import AccuracyReport
from aitune_core.reporting.summary import GraphReport
from aitune_core.strategies.base import TuneStrategy

Routes = dict[Hashable, Route]


@attrs.define(eq=False)
class Outcome:
    """What serves each module after the search, the report's section, and each module's checkpoint record."""

    routes: dict[str, Routes]
    report: AccuracyReport
    records: dict[str, AccuracyRecord]


@attrs.define(eq=False)
class Pipeline:
    """The user's function on the held-out data, with some modules' lossy routes in place of their lossless ones."""

    func: Callable[..., Any]
    held: HeldOut
    sizes: list[int] | None
    device: torch.device
    budget: AccuracyBudget
    modules: list[Module]
    lossless: dict[str, Routes]
    lossy: dict[str, Routes]
    reference: Outputs | None = None

    def eager(self) -> None:
        """Take eager's outputs, every module running its original forward, as the reference."""
        for module in self.modules:
            module.deactivate()
        self.reference = run_pipeline(self.func, self.held, self.sizes, self.device)

    def measure(self, lossy: frozenset[str]) -> float:
        assert self.reference is not None, "eager's outputs are taken first"
        with contextlib.ExitStack() as stack:
            for module in self.modules:
                stack.enter_context(module.trial_routes(self.routes(module.name, lossy)))
            outputs = run_pipeline(self.func, self.held, self.sizes, self.device)
        return drop(self.budget, outputs, self.reference)

    def routes(self, name: str, lossy: frozenset[str]) -> Routes:
        routes = dict(self.lossless[name])
        if name in lossy:
            routes.update(self.lossy[name])
        return routes


def choose_lossy(
    func: Callable[..., Any],
    held: HeldOut,
    sizes: list[int] | None,
    device: torch.device,
    budget: AccuracyBudget,
    modules: list[tuple[Module, TuneStrategy, dict[Hashable, GraphSpec]]],
    lossless: dict[str, Routes],
    reports: list[GraphReport],
    executor: Executor,
    profiling: ProfilingBudget,
    log: Any,
) -> Outcome:
    """Search which modules go lossy under ``budget``; ``lossless``: each module's routes from the lossless pass."""
    report = AccuracyReport(budget.metric_name, budget.max_drop, held.note, held.fingerprint)
    lossy: dict[str, Routes] = {}
    tried: list[LossyGraph] = []
    options: list[Option] = []
    if budget.max_drop == 0:
        report.notes.append("A budget of 0 allows no lossy backend: the lossless routes serve, as without a budget.")
    else:
        for index, (module, strategy, specs) in enumerate(modules, start=1):
            trial = lossy_strategy(strategy, device)
            if trial is None:
                continue
            log.info("accuracy: tuning lossy candidates", module=module.name, progress=f"{index}/{len(modules)}")
            graphs = tune_lossy(module, trial, device, executor, specs, reports, log.bind(module=module.name))
            tried.extend(graphs)
            found = option(module.name, graphs)
            if found is not None:
                options.append(found)
                lossy[module.name] = {g.key: g.route for g in graphs if g.faster and g.lossy_backends}
            else:
                report.notes.append(f"`{module.name}`: no lossy candidate beat its lossless winner ({_why(graphs)})")
    pipeline = Pipeline(func, held, sizes, device, budget, [m for m, _, _ in modules], lossless, lossy)
    tried_modules = {g.report.module for g in tried}
    total_s = sum(g.lossless_s or 0.0 for g in tried) + sum(
        s for r in reports if r.module in lossless and r.module not in tried_modules and (s := seconds(r)) is not None
    )
    cap = f"the profiling cap of {profiling.cap_s:g} s is spent (config.profile_cap_s)"
    try:
        pipeline.eager()
        chosen = search(options, pipeline.measure, report, total_s, lambda: cap if profiling.exhausted else None, log)
    except BaseException:
        release(tried, set())
        raise
    if not options and budget.max_drop > 0:
        report.notes.append("No lossy candidate built and beat its module's lossless winner: the lossless routes serve")
    elif options and not chosen:
        report.notes.append(
            f"No lossy candidate fits the budget of {budget.max_drop:g}: the lossless routes serve, as without one."
        )
    routes = {name: pipeline.routes(name, chosen) for name in lossless}
    release(tried, {id(b) for served in routes.values() for route in served.values() for b in route.backends})
    records = {name: _record(budget, report, held, routes[name]) for name in lossless}
    return Outcome(routes, report, records)


def _why(graphs: list[LossyGraph]) -> str:
    """What each lossy candidate of the module came to: its status, and its speed or its reason."""
    parts = []
    for graph in graphs:
        for row in graph.report.candidates:
            if row.status in ("fallback", "skipped"):
                continue
            batch = graph.report.shown_batch
            measured = row.speedups.get(batch) if batch is not None else None
            detail = f"{measured.median:.2f}x eager" if measured is not None else (row.reason[:80] or row.stage)
            parts.append(f"{row.backend} {row.status}: {detail}")
    return "; ".join(parts) or "none built"


def _record(budget: AccuracyBudget, report: AccuracyReport, held: HeldOut, routes: Routes) -> AccuracyRecord:
    choices = [
        LossyChoice(route.graph.name, backend.describe())
        for route in routes.values()
        for backend in route.backends
        if backend.lossy
    ]
    return AccuracyRecord(budget.metric_name, budget.max_drop, report.final_drop, held.fingerprint, held.note, choices)
