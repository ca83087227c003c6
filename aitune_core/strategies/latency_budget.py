"""LatencyBudgetStrategy: at each serving batch size, the fastest candidate whose p90 latency fits a budget.

Measured as MaxThroughputStrategy measures; a candidate may serve a batch size only
where its p90 latency is within ``budget_ms``. One that fits at no batch size is
rejected with its best latency as the reason. Eager serves where nothing faster fits.
"""

from __future__ import annotations

from typing import Any

from aitune_core.backends.base import Backend
from aitune_core.evaluate.result import CandidateResult, Status
from aitune_core.profiling.measurement import Measurement
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.ranking import Ranking
from aitune_core.strategies.run import GraphRun


class LatencyBudgetStrategy(TuneStrategy):
    name = "Latency Budget Strategy"
    description = "evaluate all backends, return the highest throughput within the latency budget"
    parallel_candidates = True

    def __init__(self, backends: Any = None, *, budget_ms: float, **options: Any) -> None:
        if budget_ms <= 0:
            raise ValueError(f"budget_ms must be positive, got {budget_ms}")
        super().__init__(backends, **options)
        self.budget_ms = float(budget_ms)

    def _fits(self, result: CandidateResult, measurement: Measurement) -> bool:
        return measurement.p90_ms <= self.budget_ms

    def lost(self, run: GraphRun, result: CandidateResult, ranking: Ranking) -> tuple[Status, str]:
        if any(self._fits(result, m) for m in result.sweep):
            return super().lost(run, result, ranking)
        fastest = min(m.p90_ms for m in result.sweep)
        result.stage = "latency budget"
        return "rejected", f"p90 latency {fastest:.3f} ms at best, over the {self.budget_ms:g} ms budget"

    def _tune(self, run: GraphRun) -> Backend:
        results = list(run.evaluate_all(run.candidates()))
        return run.route_by_batch(results, run.serving_sizes(), allowed=self._fits)
