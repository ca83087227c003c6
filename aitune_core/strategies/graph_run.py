"""One graph through its strategy, as ``tune`` runs it: the graph's run, and its report row.

``tune`` runs every wrapped module's graphs this way, and partitioning runs each
submodule's graphs the same way, so that a child graph is chosen, left eager and
reported exactly as a module's graph is.

Where the executor builds several candidates at once, ``tune`` first submits the
builds of every graph of every module together (:func:`submit_early`), then runs the
graphs one after another in their usual order, each collecting its own builds,
validating and timing them: the builds overlap, and the outcome does not depend on
which build ends first.
"""

from __future__ import annotations

from typing import Any

import torch

from aitune_core.backends.base import Backend
from aitune_core.executors.base import Executor, ExecutorError
from aitune_core.guard import ModuleChangedError, ModuleRestoreError
from aitune_core.reporting.summary import GraphReport
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.request import GraphTuneRequest
from aitune_core.strategies.run import GraphRun


def run_graph(
    strategy: TuneStrategy,
    request: GraphTuneRequest,
    executor: Executor,
    log: Any,
    run: GraphRun | None = None,
) -> tuple[GraphRun, GraphReport]:
    """The run of ``strategy`` on the request's graph (its ``backend`` ACTIVE, its ``lower`` ranges), and its row.

    A graph whose tuning raises stays eager with the reason in its row (eager itself
    failing on a generated input, say), so the graphs already tuned keep theirs. What
    concerns the user's module or the setup (a changed module, a failed restore, an
    executor that cannot run) propagates, as does everything from a strategy that
    surfaces its errors. ``run``: the graph's run when its builds were submitted early.
    """
    graph = request.graph
    if run is None:
        run = strategy.start(request)
    try:
        with torch.no_grad():
            run.tune(executor)
    except (ModuleChangedError, ModuleRestoreError, ExecutorError):
        raise
    except Exception as error:
        if strategy.surfaces_errors:
            raise
        reason = f"tuning this graph raised {type(error).__name__}: {error}"
        log.warning("graph left eager", graph=graph.name, reason=reason)
        with torch.no_grad():
            run.give_up(reason)
    report = GraphReport(
        request.name,
        graph.name,
        type(strategy).__name__,
        list(run.results),
        list(run.session.eager_sweep),
        list(run.eager_serves),
    )
    return run, report


def submit_early(runs: list[GraphRun], executor: Executor, log: Any) -> list[GraphRun]:
    """Submit the builds of every run whose strategy and executor allow it, all before any is awaited.

    Every graph is prepared first (its strategy's batch-size search, which is timed and
    so runs before any build starts), then all are submitted in the given order.
    Returns the runs that were submitted; the others are tuned in their turn as usual
    (a preparation that raises is logged, and raises again there).
    """
    ready: list[tuple[GraphRun, list[Backend]]] = []
    for run in runs:
        run.executor = executor
        if not run.strategy.parallel_candidates or executor.max_parallel(run.session) <= 1:
            continue
        try:
            with torch.no_grad():
                candidates = run.strategy.early_candidates(run)
        except Exception as error:
            log.info("graph built in its turn", graph=run.session.graph.name, reason=f"{type(error).__name__}: {error}")
            continue
        if candidates is not None:
            ready.append((run, candidates))
    for run, candidates in ready:
        run.submit_all(candidates)
    if ready:
        log.info("builds submitted together", graphs=len(ready), candidates=sum(len(c) for _, c in ready))
    return [run for run, _ in ready]
