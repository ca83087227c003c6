"""MinLatencyStrategy: the correct candidate with the lowest median latency at the smallest batch."""

from __future__ import annotations

from pathlib import Path

import torch

from aitune_core.backends.base import Backend
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.candidates import CandidateResult


class MinLatencyStrategy(TuneStrategy):
    name = "Min Latency Strategy"
    description = "evaluate all backends, return backend with minimum latency at the smallest batch size"
    parallel_candidates = True

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
        batch = self.session.batch_range()
        profile_at = [batch[0] if batch else None]
        best: CandidateResult | None = None
        for result in self.evaluate_all(self.candidates(device), profile_at):
            if result.status != "passed" or result.measurement is None:
                continue
            if best is None or result.measurement.median_ms < best.measurement.median_ms:  # type: ignore[union-attr]
                if best is not None:
                    self.discard(best)
                best = result
            else:
                self.discard(result)
        if best is None:
            return self.eager_fallback("no candidate built and validated")
        if not self.passes_gate(best, best.measurement):
            self.discard(best)
            return self.eager_fallback(best.reason)
        return self.select(best)
