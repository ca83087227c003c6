"""``tune()``: gather real calls, key them into graphs, tune every graph, then route.

1. Gathering runs ``func`` once per batch of each batch size, with the batch size in
   the global context and gradients off, in a recording session: wrapped modules record
   the calls it makes, and only those (and earlier runs') are tuned from.
2. Each wrapped module is tuned on its own, the others deactivated, graph by graph,
   by its strategy.
3. All modules are activated: calls are routed to the chosen backends.

Where each candidate is built, validated and profiled is the executor's choice
(``executor=`` or ``config.executor``); the executor lives for one ``tune`` call. An
executor that builds several candidates at once gets the builds of every graph of
every module together, before step 2 (see :func:`~aitune_core.strategies.graph_run.submit_early`);
step 2 then validates and times graph after graph in the same order, so the report and
the routes are those of the one-at-a-time run.

The user's modules come back as they were given: a module in training mode is refused
at its first call, before it runs; every module's training flags are restored when
``tune`` returns, raises or is interrupted; and each module's candidates run inside one
:class:`~aitune_core.guard.ModuleGuard`, whose copy of the weights is made at the
module's first candidate step and dropped when the module is tuned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from aitune_core.accuracy.budget import AccuracyBudget
from aitune_core.accuracy.candidates import lossless_strategy
from aitune_core.accuracy.heldout import HeldOut, split
from aitune_core.accuracy.runner import choose_lossy
from aitune_core.config import config
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.data import check_batch_sizes, samples_generator
from aitune_core.executors.base import Executor
from aitune_core.executors.progress import BUILD_PROGRESS
from aitune_core.executors.registry import resolve_executor
from aitune_core.extensions import ensure_plugins, slots
from aitune_core.graphs.declared_graph import DeclarationError, check_declared_paths, declared_graph
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.guard import ModuleGuard, TrainingModes, refusing_training
from aitune_core.log import get_logger
from aitune_core.module.router import Route
from aitune_core.module.wrapper import MODULE_REGISTRY, Module, recording_session
from aitune_core.names import default_device
from aitune_core.partition.descent import partition_fallback, serves_eagerly
from aitune_core.profiling.budget import profiling_budget
from aitune_core.reporting.console import emit_block
from aitune_core.reporting.summary import TuneReport
from aitune_core.store import eviction
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.defaults import default_backends
from aitune_core.strategies.graph_run import run_graph, submit_early
from aitune_core.strategies.max_throughput import MaxThroughputStrategy
from aitune_core.strategies.request import GraphTuneRequest
from aitune_core.strategies.run import GraphRun
from aitune_core.threads import resolve_threads, running_at
from aitune_core.validation.inputs import to_device


class TuningError(RuntimeError):
    """Tuning could not produce what was asked (see ``config.on_all_candidates_failed``)."""


def tune(
    func: Callable[..., Any],
    dataset: Any,
    batch_sizes: Sequence[int] | None = None,
    max_num_batches_per_batch_size: int | None = None,
    device: torch.device | str | None = None,
    dry_run: bool = False,
    strategy: TuneStrategy | None = None,
    executor: str | Executor | None = None,
    partition: bool | None = None,
    accuracy: AccuracyBudget | None = None,
    threads: int | None = None,
) -> TuneReport:
    """Tune every wrapped module that ``func`` calls, on real data from ``dataset``.

    batch_sizes: sizes to batch the dataset's unbatched samples into; at least two are
        needed to tell batch axes from static ones. None uses each item as one call.
    device: where to tune; wrapped modules are moved there. Default: where the wrapped
        modules' parameters are (CUDA when available for modules without parameters).
    strategy: used for modules created without their own (default MaxThroughputStrategy).
    executor: where candidates run: ``"inprocess"``, ``"subprocess"``, a plugin's name such
        as ``"ray"``, or an Executor instance (left open for the caller to close). None
        takes ``config.executor``.
    partition: when no compiled candidate of a graph builds and validates, tune the wrapped
        module's submodules instead, keeping its own forward between them (see
        :mod:`aitune_core.partition`). None takes ``config.partition``.
    accuracy: an :class:`~aitune_core.accuracy.AccuracyBudget`: after the lossless winners,
        lossy candidates (quantization, reduced precision) serve the modules where the whole
        pipeline's metric on held-out data stays within the budget (:mod:`aitune_core.accuracy`).
        None: lossless, as always.
    threads: the torch thread count the tuned modules will serve at: candidates are built,
        validated and timed at it (torch runs at it during ``tune``, then goes back to the
        caller's setting), and the report and checkpoints record it. None: torch's own
        setting now (``torch.get_num_threads()``), which is what the process serves at.
    Returns a :class:`TuneReport`; ``print`` it for the summary table.
    Raises :class:`~aitune_core.guard.TrainingModeError` when ``func`` calls a wrapped module
    in training mode, before that call runs.

    Only the calls ``func`` makes are tuned from (with what earlier ``tune`` runs gathered:
    a re-tune keeps their graphs, and checkpoints' graphs): from the moment ``tune`` is
    called until it returns, other threads calling the wrapped modules run them (or the
    routes they had) unrecorded; and the calls a module recorded on its own before, from
    any thread, are kept apart and never tuned from, so traffic served before tuning never
    widens the tuned ranges (:mod:`aitune_core.module.recordings` says why they are kept).
    """
    if not callable(func):
        raise TypeError(f"func must be callable (a model or a function calling it), got {type(func).__name__}")
    sizes = check_batch_sizes(batch_sizes)
    measured_at = resolve_threads(threads)
    if accuracy is not None and not isinstance(accuracy, AccuracyBudget):
        raise TypeError(f"accuracy must be an aitune_core.AccuracyBudget, got {type(accuracy).__name__}")
    held: HeldOut | None = None
    wrapped = list(MODULE_REGISTRY.modules.values())
    modes = TrainingModes(m for module in wrapped for m in (module, *module.module.modules()))
    # Claimed before anything else: from here on, other threads' calls run unrecorded, never tuning data.
    claimed = [(module, module.start_recording()) for module in wrapped]
    try:
        eviction.tune_started()  # what processes that are gone left in the cache goes before anything is built
        if accuracy is not None:
            dataset, held = split(dataset, accuracy)
        ensure_plugins()  # executors, default candidates and strategies may come from plugins
        # Resolved before gathering, so a misspelt or missing executor fails before any work is done.
        chosen, owned = resolve_executor(executor if executor is not None else config.executor)
        try:
            partitioning = config.partition if partition is None else bool(partition)
            with running_at(measured_at):
                report = _tune(
                    func,
                    dataset,
                    sizes,
                    max_num_batches_per_batch_size,
                    device,
                    dry_run,
                    strategy,
                    chosen,
                    partitioning,
                    (accuracy, held) if accuracy is not None and held is not None else None,
                )
            return report
        finally:
            if owned:
                chosen.close()
    except BaseException:
        for module, state in claimed:
            module.restore(state)  # stopped anywhere: each wrapper records or serves as it did before
        raise
    finally:
        modes.restore()
        eviction.tune_finished()  # build folders nothing serves from go; the cache is kept under its cap


def _tune(
    func: Callable[..., Any],
    dataset: Any,
    sizes: list[int] | None,
    max_num_batches_per_batch_size: int | None,
    device: torch.device | str | None,
    dry_run: bool,
    strategy: TuneStrategy | None,
    executor: Executor,
    partition: bool = False,
    accuracy: tuple[AccuracyBudget, HeldOut] | None = None,
) -> TuneReport:
    log = get_logger()
    started = time.perf_counter()
    modules = list(MODULE_REGISTRY.modules.values())
    if not modules:
        raise TuningError("no aitune module exists; wrap what should be tuned with aitune_core.Module(module, name)")
    target = torch.device(device) if device is not None else device_of(modules)
    if sizes is not None and len(sizes) == 1:
        log.warning(
            "one batch size given; shapes are treated as static",
            hint="give at least two batch sizes, e.g. batch_sizes=[1, 2, 4, 8], to detect batch axes",
        )
    log.info(
        "tune started",
        modules=[m.name for m in modules],
        batch_sizes=sizes,
        device=str(target),
        threads=torch.get_num_threads(),
        **({} if executor.name == "inprocess" else {"executor": executor.describe()}),
    )

    previous = {module.name: module.start_recording() for module in modules}
    calls_before = {module.name: module.recorded_calls for module in modules}
    try:
        if device is not None:
            for module in modules:
                _move_to(module, target, log)
        with refusing_training((module.name, module, module.module) for module in modules):
            calls = _gather(func, dataset, sizes, max_num_batches_per_batch_size, target, log)
    except BaseException:
        for module in modules:
            module.restore(previous[module.name])
        raise
    gathered = time.perf_counter()
    called = [module for module in modules if module.recorded_calls > calls_before[module.name]]
    for module in modules:
        if module not in called or dry_run:
            module.restore(previous[module.name])
    if not called:
        raise TuningError(
            "func called no aitune module while gathering; make sure the wrapped modules are the ones func runs"
        )
    report = TuneReport(dry_run=dry_run, partition=partition, threads=torch.get_num_threads())
    report.timings["gather"] = gathered - started
    if dry_run:
        report.plan = _plan(called, strategy, target, calls)
        for line in report.plan:
            log.info("plan", step=line)
        return report

    try:
        specs = {module.name: declared_specs(module) for module in called}
    except DeclarationError:
        for module in modules:
            module.restore(previous[module.name])
        raise
    for module in called:
        module.drop_routes()
    routes: dict[str, dict[Hashable, Route]] = {}
    records: dict[str, Any] = {}
    log.info(
        "profiling cap",
        cap_s=config.profile_cap_s,
        note="comparisons measure until decided; all of them together stop here (config.profile_cap_s)",
    )
    BUILD_PROGRESS.reset()
    strategies = {module.name: strategy_for(module, strategy, target) for module in called}
    # With a budget, lossless first, as without one; the lossy candidates come after (choose_lossy).
    used = {name: lossless_strategy(s, target) if accuracy is not None else s for name, s in strategies.items()}
    guards = {m.name: ModuleGuard(m.module, m.name, log=get_logger(module=m.name)) for m in called}
    try:
        with profiling_budget(config.profile_cap_s) as budget:
            early = _submit_early(called, used, target, executor, specs, guards, log)
            for index, module in enumerate(called, start=1):
                for other in called:
                    if other is not module:
                        other.deactivate()
                log.info("tuning module", module=module.name, progress=f"{index}/{len(called)}")
                routes[module.name] = tune_module(
                    module, used[module.name], target, report, executor, specs[module.name], guards[module.name], early
                )
            if accuracy is not None:
                outcome = choose_lossy(
                    func,
                    accuracy[1],
                    sizes,
                    target,
                    accuracy[0],
                    [(module, strategies[module.name], specs[module.name]) for module in called],
                    routes,
                    report.graphs,
                    executor,
                    budget,
                    log,
                )
                routes, report.accuracy, records = outcome.routes, outcome.report, dict(outcome.records)
    except BaseException:
        # Stopped half-way: every module goes back to the routes it served before this run.
        for module in called:
            module.restore(previous[module.name])
        raise
    finally:
        for guard in guards.values():
            guard.release()
    report.timings.update(_phase_totals(report))
    report.timings["total"] = time.perf_counter() - started
    report.profiling = budget
    emit_block("Tuning summary", report.summary(), level=logging.WARNING)
    # Last: should anything before raise (Ctrl-C while the summary prints), every module serves as before.
    for module in called:
        module.set_routes(routes[module.name])
        module.__dict__["_accuracy"] = records.get(module.name)  # what checkpoints store; None without a budget
        module.__dict__["_threads"] = report.threads
    log.info("tune finished", duration_s=round(report.timings["total"], 2))
    return report


def device_of(modules: list[Module]) -> torch.device:
    """Where the wrapped modules already live; a model is not moved unless a device is asked for."""
    for module in modules:
        parameter = next(iter(module.module.parameters()), None)
        if parameter is not None and not parameter.is_meta:
            return parameter.device
    return default_device()


def _move_to(module: Module, device: torch.device, log: Any) -> None:
    parameter = next(iter(module.module.parameters()), None)
    if parameter is not None and parameter.device != device and not parameter.is_meta:
        log.info("moving module to the tuning device", module=module.name, device=str(device))
        module.module.to(device)


def _gather(
    func: Callable[..., Any], dataset: Any, sizes: list[int] | None, limit: int | None, device: torch.device, log: Any
) -> int:
    count = 0
    # Only this run's calls are recorded: other threads using the modules meanwhile are not tuning data.
    with torch.no_grad(), recording_session():
        for batch_size, args, kwargs in samples_generator(dataset, sizes, limit):
            args, kwargs = to_device((args, kwargs), device)
            with global_context:
                global_context.set(BATCH_SIZE_KEY, batch_size)
                func(*args, **kwargs)
            count += 1
    log.info("gathering finished", calls=count)
    return count


def strategy_for(module: Module, default: TuneStrategy | None, device: torch.device) -> TuneStrategy:
    """The module's own strategy, else ``tune``'s, else a plugin's choice, else MaxThroughputStrategy."""
    if module.strategy is not None:
        return module.strategy
    if default is not None:
        return default
    return slots().choose_strategy(module, device) or MaxThroughputStrategy()


def declared_specs(module: Module) -> dict[Hashable, GraphSpec]:
    """Each recorded graph of ``module`` widened to its declared ranges (itself when nothing is declared).

    Raises DeclarationError before anything is built when a declared path is in no
    recorded graph, or a recorded call lies outside its declared range.
    """
    records = module.graphs
    shapes = module.dynamic_shapes
    if shapes is None:
        return {key: record.spec for key, record in records.items()}
    check_declared_paths(module.name, shapes, [record.spec for record in records.values()])
    declared = {key: declared_graph(record.spec, shapes, record.samples) for key, record in records.items()}
    log = get_logger(module=module.name)
    for graph in declared.values():
        if graph.declared:
            log.info("declared ranges", graph=graph.name, ranges=[r.describe() for r in graph.declared])
    return declared


EarlyRuns = dict[tuple[str, Hashable], GraphRun]
"""Graphs whose builds were submitted before their turn, by module name and graph key."""


def _submit_early(
    modules: list[Module],
    strategies: dict[str, TuneStrategy],
    device: torch.device,
    executor: Executor,
    specs: dict[str, dict[Hashable, GraphSpec]],
    guards: dict[str, ModuleGuard],
    log: Any,
) -> EarlyRuns:
    """Submit the builds of every graph of every module at once, where the executor builds several at once."""
    runs: EarlyRuns = {}
    for module in modules:
        module.deactivate()  # the searches call the modules themselves, never what a wrapped submodule routes to
        strategy = strategies[module.name]
        for record in module.graphs.values():
            graph = specs[module.name].get(record.spec.key, record.spec)
            cache_dir = config.cache_dir / module.name / graph.name
            guard = guards[module.name]
            request = GraphTuneRequest(
                module.module, module.name, graph, record.samples, device, cache_dir, module.signature, guard
            )
            run = strategy.start(request)
            runs[(module.name, graph.key)] = run
    submitted = {id(run) for run in submit_early(list(runs.values()), executor, log)}
    return {key: run for key, run in runs.items() if id(run) in submitted}


def tune_module(
    module: Module,
    strategy: TuneStrategy,
    device: torch.device,
    report: TuneReport,
    executor: Executor,
    specs: dict[Hashable, GraphSpec],
    guard: ModuleGuard | None = None,
    early: EarlyRuns | None = None,
) -> dict[Hashable, Route]:
    """One module's graphs, tuned; ``guard`` and ``early`` default to a new guard and no builds submitted early.

    The entry point for tuning one module on the calls it already recorded, after
    :func:`tune`'s gathering (``aitune-jit`` does, with :func:`device_of`,
    :func:`strategy_for` and :func:`declared_specs`); the routes are returned, not installed.
    """
    log = get_logger(module=module.name)
    guard = guard if guard is not None else ModuleGuard(module.module, module.name, log=log)
    try:
        return _tune_graphs(module, strategy, device, report, executor, guard, log, specs, early or {})
    finally:
        guard.release()


def _tune_graphs(
    module: Module,
    strategy: TuneStrategy,
    device: torch.device,
    report: TuneReport,
    executor: Executor,
    guard: ModuleGuard,
    log: Any,
    specs: dict[Hashable, GraphSpec],
    early: EarlyRuns,
) -> dict[Hashable, Route]:
    routes: dict[Hashable, Route] = {}
    graphs = list(module.graphs.values())
    for index, record in enumerate(graphs, start=1):
        graph = specs.get(record.spec.key, record.spec)
        log.info(
            "tuning graph",
            graph=graph.name,
            progress=f"{index}/{len(graphs)}",
            samples=len(record.samples),
            strategy=strategy.describe(),
        )
        emit_block(
            f"Graph {graph.name} of module `{module.name}`", graph.describe(), module=module.name, graph=graph.name
        )
        cache_dir = config.cache_dir / module.name / graph.name
        # A graph that raises stays eager; a changed module or a broken setup stops tune(),
        # which puts every route back.
        request = GraphTuneRequest(
            module.module, module.name, graph, record.samples, device, cache_dir, module.signature, guard
        )
        run, graph_report = run_graph(strategy, request, executor, log, early.get((module.name, graph.key)))
        report.graphs.append(graph_report)
        selected = graph_report.selected
        assert run.backend is not None, "a run ends with a backend, tuned or eager"
        backend, lower = run.backend, run.lower
        if report.partition and serves_eagerly(backend, lower):
            partitioned = partition_fallback(
                module, record, backend, graph_report, strategy, device, executor, guard, report
            )
            if partitioned is not backend:  # the partition serves every batch; its parts route their own
                backend, lower = partitioned, []
            selected = graph_report.selected
        if selected is not None and selected.status == "fallback" and config.on_all_candidates_failed == "raise":
            raise TuningError(
                f"module `{module.name}`, graph {graph.name}: no candidate qualified ({selected.reason}); "
                "set aitune_core.config.on_all_candidates_failed = 'eager' to keep such graphs eager"
            )
        routes[graph.key] = Route(graph, backend, lower, strategy.tolerances)  # what spot checks compare with
    return routes


def _phase_totals(report: TuneReport) -> dict[str, float]:
    totals = {"build": 0.0, "validate": 0.0, "profile": 0.0}
    for graph in report.graphs:
        for candidate in graph.candidates:
            totals["build"] += candidate.build_s
            totals["validate"] += candidate.validate_s
            totals["profile"] += candidate.profile_s
    return totals


def _plan(modules: list[Module], strategy: TuneStrategy | None, device: torch.device, calls: int) -> list[str]:
    lines = [
        f"{calls} calls gathered; tuning on {device}",
        f"profiling: until each comparison is decided, at most {config.profile_cap_s:.0f} s in all "
        "(config.profile_cap_s)",
    ]
    for module in modules:
        chosen = strategy_for(module, strategy, device)
        if chosen.backends is not None:
            offered = [(blueprint, blueprint.availability(device)) for blueprint in chosen.backends]
        else:
            offered = default_backends(device)
        for graph in module.graph_specs:
            lines.append(f"module `{module.name}` graph {graph.name}: {type(chosen).__name__}")
            for blueprint, availability in offered:
                state = "available" if availability.available else f"skipped: {availability.reason}"
                lines.append(f"  {blueprint.describe()} ({state})")
    return lines
