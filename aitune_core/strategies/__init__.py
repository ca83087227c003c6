"""Strategies: how each graph's backend is chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "CandidateResult": "aitune_core.evaluate.result",
    "GraphSession": "aitune_core.evaluate.session",
    "TuneStrategy": "aitune_core.strategies.base",
    "FirstWinsStrategy": "aitune_core.strategies.first_wins",
    "LatencyBudgetStrategy": "aitune_core.strategies.latency_budget",
    "MaxThroughputStrategy": "aitune_core.strategies.max_throughput",
    "MinLatencyStrategy": "aitune_core.strategies.min_latency",
    "OneBackendStrategy": "aitune_core.strategies.one_backend",
    "GraphRun": "aitune_core.strategies.run",
    "GraphTuneRequest": "aitune_core.strategies.request",
}

__all__ = [
    "CandidateResult",
    "FirstWinsStrategy",
    "GraphRun",
    "GraphSession",
    "GraphTuneRequest",
    "LatencyBudgetStrategy",
    "MaxThroughputStrategy",
    "MinLatencyStrategy",
    "OneBackendStrategy",
    "TuneStrategy",
]

__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"module 'aitune_core.strategies' has no attribute {name!r}"
)

if TYPE_CHECKING:
    from aitune_core.evaluate.result import CandidateResult
    from aitune_core.evaluate.session import GraphSession
    from aitune_core.strategies.base import TuneStrategy
    from aitune_core.strategies.first_wins import FirstWinsStrategy
    from aitune_core.strategies.latency_budget import LatencyBudgetStrategy
    from aitune_core.strategies.max_throughput import MaxThroughputStrategy
    from aitune_core.strategies.min_latency import MinLatencyStrategy
    from aitune_core.strategies.one_backend import OneBackendStrategy
    from aitune_core.strategies.request import GraphTuneRequest
    from aitune_core.strategies.run import GraphRun
