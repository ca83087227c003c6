"""OneBackendStrategy: exactly one backend; its build and correctness errors surface unchanged.

If it is correct but does not beat eager, the graph stays eager.
"""

from __future__ import annotations

from typing import Any

from aitune_core.backends.base import Backend
from aitune_core.evaluate.session import GraphSession
from aitune_core.strategies.base import TuneStrategy


class OneBackendStrategy(TuneStrategy):
    name = "One Backend Strategy"
    description = "use exactly one backend, fail with its original error"
    surfaces_errors = True

    def __init__(self, backend: Backend, **options: Any) -> None:
        if not isinstance(backend, Backend):
            raise TypeError(f"OneBackendStrategy takes one Backend, got {type(backend).__name__}")
        super().__init__([backend], **options)

    def _tune(self, session: GraphSession) -> Backend:
        assert self.backends is not None
        blueprint = self.backends[0]
        availability = blueprint.availability(session.device)
        if not availability.available:
            raise RuntimeError(f"{blueprint.describe()} cannot run here: {availability.reason}")
        result = self.evaluate(blueprint, raise_errors=True)
        return self.route_by_batch([result], self.serving_sizes())
