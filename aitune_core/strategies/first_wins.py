"""FirstWinsStrategy: the first candidate, in priority order, that builds, is correct and beats eager.

Candidates are tried one at a time on every executor: the first that qualifies ends
the search, so running the later ones in parallel would only spend time on builds
that are thrown away.
"""

from __future__ import annotations

from pathlib import Path

import torch

from aitune_core.backends.base import Backend
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.strategies.base import TuneStrategy


class FirstWinsStrategy(TuneStrategy):
    name = "First Wins Strategy"
    description = "try backends in order, return the first that builds, validates and beats eager"

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
        profile_at = [batch[1] if batch else None]
        for blueprint in self.candidates(device):
            result = self.evaluate(blueprint, profile_at)
            if result.status == "passed" and self.passes_gate(result, result.measurement):
                return self.select(result)
            self.discard(result)
        return self.eager_fallback("no candidate built, validated and beat eager")
