"""LatencyBudgetStrategy: the highest throughput whose p90 latency stays within a budget.

Each candidate is profiled over the batch sizes of the graph; for each, the best
throughput among the batch sizes whose p90 latency fits ``budget_ms`` counts. A
candidate that cannot meet the budget at any batch size is rejected with its best
latency as the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from aitune_core.backends.base import Backend
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.profiling.measurement import Measurement
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.candidates import CandidateResult


class LatencyBudgetStrategy(TuneStrategy):
    name = "Latency Budget Strategy"
    description = "evaluate all backends, return the highest throughput within the latency budget"
    parallel_candidates = True

    def __init__(self, backends: Any = None, *, budget_ms: float, **options: Any) -> None:
        if budget_ms <= 0:
            raise ValueError(f"budget_ms must be positive, got {budget_ms}")
        super().__init__(backends, **options)
        self.budget_ms = float(budget_ms)

    def _within_budget(self, result: CandidateResult) -> Measurement | None:
        fitting = [m for m in result.sweep if m.p90_ms <= self.budget_ms]
        return max(fitting, key=lambda m: m.throughput) if fitting else None

    def _tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: list[Sample],
        device: torch.device,
        cache_dir: Path,
    ) -> Backend:
        assert self.session is not None
        profile_at = self.session.sweep_sizes()
        best: CandidateResult | None = None
        for result in self.evaluate_all(self.candidates(device), profile_at):
            if result.status != "passed":
                continue
            fitting = self._within_budget(result)
            if fitting is None:
                fastest = min(m.p90_ms for m in result.sweep)
                result.status, result.stage = "rejected", "latency budget"
                result.reason = f"p90 latency {fastest:.3f} ms at best, over the {self.budget_ms:g} ms budget"
                self.discard(result)
                continue
            result.measurement = fitting
            if best is None or fitting.throughput > best.measurement.throughput:  # type: ignore[union-attr]
                if best is not None:
                    self.discard(best)
                best = result
            else:
                self.discard(result)
        if best is None:
            return self.eager_fallback(f"no candidate met the {self.budget_ms:g} ms latency budget")
        if not self.passes_gate(best, best.measurement):
            self.discard(best)
            return self.eager_fallback(best.reason)
        return self.select(best)
