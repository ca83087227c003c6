"""TuneStrategy: how a graph's backend is chosen, as configuration.

A strategy holds what the user chose (its candidates, the performance gate, tolerances,
the profile, the timer, how many backends a graph may keep) and the policy that turns
those into a choice: subclasses implement ``_tune(run)`` and may extend
``_pre_tune(run)``/``_post_tune(run)``. What one graph's tuning finds lives in that
graph's :class:`~aitune_core.strategies.run.GraphRun`, made by :meth:`TuneStrategy.start`
from a :class:`~aitune_core.strategies.request.GraphTuneRequest` (the graph, its module,
samples and device), so one strategy can tune several graphs at once. The run's helpers
(build a copy, validate against eager, compare with eager at every serving batch size
and route each range to its winner) are the same for every strategy, so custom
strategies get the same checks and the same summary rows for free.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from aitune_core.backends.base import Availability, Backend
from aitune_core.backends.tolerances import Tolerances
from aitune_core.config import config
from aitune_core.evaluate.result import (  # noqa: F401 - the errors are re-exported for strategies
    CandidateFailedError,
    CandidateRejectedError,
    CandidateResult,
    Status,
)
from aitune_core.evaluate.session import GraphSession
from aitune_core.executors.base import Executor
from aitune_core.guard import ModuleGuard
from aitune_core.log import get_logger
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.profiling.timer import Timer, WallClock
from aitune_core.strategies.defaults import default_backends
from aitune_core.strategies.ranking import Ranking, lost_reason
from aitune_core.strategies.request import GraphTuneRequest, requested
from aitune_core.strategies.run import GraphRun, never_wins

DEFAULT_PERFORMANCE_GATE = 1.01
DEFAULT_MAX_BACKENDS = 2


class TuneStrategy(abc.ABC):
    """Base of all strategies.

    backends: the candidates, in priority order. None takes the defaults that the
        installed plugins offer for the device, skipping unavailable ones with a reason.
    performance_gate: how much faster than eager a backend must be to replace it
        (1.01 = 1% faster).
    tolerances: per-dtype tolerances for comparing with eager, on top of each backend's own.
    profile: how long and how to measure.
    timer: where timings come from; the wall clock by default. Tests and benches pass a
        :class:`~aitune_core.profiling.timer.ScriptedTimer` with given latencies.
    max_backends: how many backends one graph may keep, each serving a batch range.
    """

    name: ClassVar[str] = "Tune Strategy"
    description: ClassVar[str] = ""
    parallel_candidates: ClassVar[bool] = False
    """Whether every candidate is tried whatever the others gave, so an executor may run them at once."""
    surfaces_errors: ClassVar[bool] = False
    """Whether ``tune()`` lets what this strategy raises through, instead of leaving the graph eager."""

    def __init__(
        self,
        backends: Sequence[Backend] | None = None,
        *,
        performance_gate: float = DEFAULT_PERFORMANCE_GATE,
        tolerances: Tolerances | None = None,
        profile: ProfileConfig | None = None,
        timer: Timer | None = None,
        max_backends: int = DEFAULT_MAX_BACKENDS,
    ) -> None:
        if backends is not None:
            backends = list(backends)
            for backend in backends:
                if not isinstance(backend, Backend):
                    raise TypeError(f"{type(self).__name__} takes Backend instances, got {type(backend).__name__}")
        if performance_gate <= 0:
            raise ValueError(f"performance_gate must be positive, got {performance_gate}")
        if isinstance(max_backends, bool) or not isinstance(max_backends, int) or max_backends < 1:
            raise ValueError(f"max_backends must be a whole number of at least 1, got {max_backends!r}")
        self.backends: list[Backend] | None = backends
        self.performance_gate = performance_gate
        self.tolerances = tolerances or Tolerances()
        self.profile_config = profile or ProfileConfig()
        self.timer = timer
        """Given here, or None: ``config.timer``, else the wall clock, when a graph is tuned."""
        self.max_backends = max_backends
        self.correctness_check = True
        self.performance_validation = True

    # ------------------------------------------------------------------ switches
    def enable_correctness_check(self, enabled: bool) -> TuneStrategy:
        """Turn comparing candidates with eager on or off (on by default)."""
        self.correctness_check = bool(enabled)
        return self

    def enable_performance_validation(self, enabled: bool) -> TuneStrategy:
        """Turn eager baseline profiling, the performance gate and speedups on or off."""
        self.performance_validation = bool(enabled)
        return self

    def describe(self) -> str:
        names = ", ".join(b.describe() for b in self.backends) if self.backends is not None else "plugin defaults"
        return f"{type(self).__name__}([{names}])"

    # ------------------------------------------------------------------ entry point
    def start(self, request: GraphTuneRequest, *legacy: Any, **legacy_keywords: Any) -> GraphRun:
        """A run of this strategy on the request's graph, not started yet: :meth:`GraphRun.tune` chooses its backend.

        The argument-list form of earlier versions, ``start(module, name, graph_spec,
        data, device, cache_dir, signature=None, guard=None)``, still works, with a
        DeprecationWarning.
        """
        request, _ = requested("start", request, legacy, legacy_keywords)
        log = get_logger(module=request.name, graph=request.graph.name, strategy=type(self).__name__)
        session = GraphSession(
            module=request.module,
            module_name=request.name,
            graph=request.graph,
            samples=request.samples,
            device=request.device,
            cache_dir=request.cache_dir,
            signature=request.forward_signature(),
            tolerances=self.tolerances,
            profile_config=self.profile_config,
            timer=self._timer(),
            log=log,
            guard=request.guard if request.guard is not None else ModuleGuard(request.module, request.name, log=log),
        )
        return GraphRun(self, session, owns_guard=request.guard is None)

    def tune(
        self, request: GraphTuneRequest, *legacy: Any, executor: Executor | None = None, **legacy_keywords: Any
    ) -> GraphRun:
        """Choose, build and activate one graph's backend: the run, with it as ``run.backend``.

        executor: where candidates run; None takes ``config.executor`` for this graph only.
        What the strategy raises propagates; :func:`~aitune_core.strategies.graph_run.run_graph`
        is what leaves a graph eager instead. The argument-list form of earlier versions
        (``tune(module, name, graph_spec, data, device, cache_dir, signature=None,
        executor=None, guard=None)``) still works, with a DeprecationWarning.
        """
        request, old_executor = requested("tune", request, legacy, legacy_keywords)
        run = self.start(request)
        run.tune(executor if executor is not None else old_executor)
        return run

    def _pre_tune(self, run: GraphRun) -> None:
        """Runs before :meth:`_tune`; extend to prepare the graph (keep what it finds on ``run``, not here)."""

    def _post_tune(self, run: GraphRun) -> None:
        """Runs after :meth:`_tune`; extend to clean up or report."""

    @abc.abstractmethod
    def _tune(self, run: GraphRun) -> Backend:
        """Return the tuned, ACTIVE backend for ``run``'s graph; copy blueprints, never build them.

        ``run.session`` holds the module, the graph, its samples, the device and the log;
        ``run.evaluate_all(run.candidates())`` then ``run.route_by_batch(...)`` is the
        usual body. Several graphs may be tuned at once with this strategy, so what one
        graph finds belongs on its ``run``.
        """

    def early_candidates(self, run: GraphRun) -> list[Backend] | None:
        """The candidates of ``run``'s graph to submit before its turn, so that every graph's builds run together.

        Only for strategies that try every candidate whatever the others gave
        (``parallel_candidates``), and only what ``_tune`` then takes with
        ``run.collect()`` instead of evaluating them itself. None (the default): the
        graph's candidates are built in its turn. Prepare the graph here first (a
        batch-size search that widens it), keeping what is found on ``run``.
        """
        return None

    def _timer(self) -> Timer:
        return self.timer or config.timer or WallClock()

    # ------------------------------------------------------------------ helpers for subclasses
    def allows_lossy(self) -> bool:
        """Whether lossy default candidates are tried: ``config.allow_lossy``, or tolerances given here.

        Tolerances given to the strategy are the user's own bound on the error, so
        candidates that change the numbers on purpose are judged against them.
        """
        return config.allow_lossy or bool(self.tolerances.by_dtype)

    def offered(self, device: torch.device) -> list[tuple[Backend, Availability]]:
        """Every candidate, with whether it is tried on ``device`` and, if not, why.

        Backends named in the strategy are always offered, lossy or not: naming one is
        opting in. Of the plugins' defaults, lossy ones are held back unless
        :meth:`allows_lossy`.
        """
        if self.backends is not None:
            return [(blueprint, blueprint.availability(device)) for blueprint in self.backends]
        return default_backends(device, self.allows_lossy())

    def lost(self, run: GraphRun, result: CandidateResult, ranking: Ranking) -> tuple[Status, str]:
        """``(status, reason)`` of a live candidate of ``run`` that serves no batch range; strategies may say more."""
        if never_wins(result):
            return "passed", "eager itself: where it would serve, the original module serves"
        return lost_reason(ranking, result, self.performance_gate, run.uncapped, self.max_backends)
