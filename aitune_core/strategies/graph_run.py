"""One graph through its strategy, as ``tune`` runs it: the graph's run, and its report row.

``tune`` runs every wrapped module's graphs this way, and partitioning runs each
submodule's graphs the same way, so that a child graph is chosen, left eager and
reported exactly as a module's graph is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from aitune_core.executors.base import Executor, ExecutorError
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.guard import ModuleChangedError, ModuleGuard, ModuleRestoreError
from aitune_core.reporting.summary import GraphReport
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.run import GraphRun


def run_graph(
    strategy: TuneStrategy,
    module: torch.nn.Module,
    name: str,
    graph: GraphSpec,
    samples: list[Sample],
    device: torch.device,
    cache_dir: Path,
    signature: ForwardSignature,
    executor: Executor,
    guard: ModuleGuard,
    log: Any,
) -> tuple[GraphRun, GraphReport]:
    """The run of ``strategy`` on ``graph`` (its ``backend`` ACTIVE, its ``lower`` ranges), and the graph's row.

    A graph whose tuning raises stays eager with the reason in its row (eager itself
    failing on a generated input, say), so the graphs already tuned keep theirs. What
    concerns the user's module or the setup (a changed module, a failed restore, an
    executor that cannot run) propagates, as does everything from a strategy that
    surfaces its errors.
    """
    run = strategy.start(module, name, graph, samples, device, cache_dir, signature, guard)
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
        name,
        graph.name,
        type(strategy).__name__,
        list(run.results),
        list(run.session.eager_sweep),
        list(run.eager_serves),
    )
    return run, report
