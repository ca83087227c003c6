"""One graph through its strategy, as ``tune`` runs it: the backend chosen, and the graph's report row.

``tune`` runs every wrapped module's graphs this way, and partitioning runs each
submodule's graphs the same way, so that a child graph is chosen, left eager and
reported exactly as a module's graph is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from aitune_core.backends.base import Backend
from aitune_core.executors.base import Executor, ExecutorError
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.guard import ModuleChangedError, ModuleGuard, ModuleRestoreError
from aitune_core.reporting.summary import GraphReport
from aitune_core.strategies.base import TuneStrategy


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
) -> tuple[Backend, GraphReport]:
    """The backend ``strategy`` chooses for ``graph`` (ACTIVE), and the graph's row for the summary.

    A graph whose tuning raises stays eager with the reason in its row (eager itself
    failing on a generated input, say), so the graphs already tuned keep theirs. What
    concerns the user's module or the setup (a changed module, a failed restore, an
    executor that cannot run) propagates, as does everything from a strategy that
    surfaces its errors.
    """
    try:
        with torch.no_grad():
            backend = strategy.tune(module, name, graph, samples, device, cache_dir, signature, executor, guard)
    except (ModuleChangedError, ModuleRestoreError, ExecutorError):
        raise
    except Exception as error:
        if strategy.session is None or strategy.surfaces_errors:
            raise
        reason = f"tuning this graph raised {type(error).__name__}: {error}"
        log.warning("graph left eager", graph=graph.name, reason=reason)
        with torch.no_grad():
            backend = strategy.give_up(reason)
    report = GraphReport(
        name,
        graph.name,
        type(strategy).__name__,
        list(strategy.results),
        list(strategy.session.eager_sweep) if strategy.session is not None else [],
        list(strategy.eager_serves),
    )
    return backend, report
