"""FirstWinsStrategy: the first candidate, in priority order, that builds, is correct and beats eager.

It serves the batch ranges where it beat eager by the gate; eager serves the rest.

Candidates are tried one at a time on every executor: the first that qualifies ends
the search, so running the later ones in parallel would only spend time on builds
that are thrown away.
"""

from __future__ import annotations

from aitune_core.backends.base import Backend
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.run import GraphRun


class FirstWinsStrategy(TuneStrategy):
    name = "First Wins Strategy"
    description = "try backends in order, return the first that builds, validates and beats eager"

    def _tune(self, run: GraphRun) -> Backend:
        for blueprint in run.candidates():
            result = run.evaluate(blueprint)
            planned = run.plan_routes([result], run.serving_sizes())
            if planned is not None and any(segment.winner is result for segment in planned[0]):
                return run.route(*planned)
            run.discard(result)
        return run.eager_fallback("no candidate built, validated and beat eager")
