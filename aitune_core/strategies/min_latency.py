"""MinLatencyStrategy: the correct candidate with the lowest median latency, per serving batch size.

Measured exactly as MaxThroughputStrategy measures (at a fixed batch size, the lowest
latency is the highest throughput), but without searching for a larger batch size:
latency is judged at the sizes the user's calls come in.
"""

from __future__ import annotations

from aitune_core.backends.base import Backend
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.run import GraphRun


class MinLatencyStrategy(TuneStrategy):
    name = "Min Latency Strategy"
    description = "evaluate all backends, route each batch size to the one with minimum latency"
    parallel_candidates = True

    def _tune(self, run: GraphRun) -> Backend:
        results = list(run.evaluate_all(run.candidates()))
        return run.route_by_batch(results, run.serving_sizes())
