"""OneBackendStrategy: exactly one backend; its build and correctness errors surface unchanged.

If it is correct but does not beat eager, the graph stays eager.
"""

from __future__ import annotations

from typing import Any

from aitune_core.backends.base import Backend
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.run import GraphRun


class OneBackendStrategy(TuneStrategy):
    name = "One Backend Strategy"
    description = "use exactly one backend, fail with its original error"
    surfaces_errors = True

    def __init__(self, backend: Backend, **options: Any) -> None:
        if not isinstance(backend, Backend):
            raise TypeError(f"OneBackendStrategy takes one Backend, got {type(backend).__name__}")
        super().__init__([backend], **options)

    def _tune(self, run: GraphRun) -> Backend:
        assert self.backends is not None
        blueprint = self.backends[0]
        availability = blueprint.availability(run.session.device)
        if not availability.available:
            raise RuntimeError(f"{blueprint.describe()} cannot run here: {availability.reason}")
        result = run.evaluate(blueprint, raise_errors=True)
        return run.route_by_batch([result], run.serving_sizes())
