"""Strategies: how each graph's backend is chosen."""

from aitune_core.evaluate.result import CandidateResult
from aitune_core.evaluate.session import GraphSession
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.first_wins import FirstWinsStrategy
from aitune_core.strategies.latency_budget import LatencyBudgetStrategy
from aitune_core.strategies.max_throughput import MaxThroughputStrategy
from aitune_core.strategies.min_latency import MinLatencyStrategy
from aitune_core.strategies.one_backend import OneBackendStrategy

__all__ = [
    "CandidateResult",
    "FirstWinsStrategy",
    "GraphSession",
    "LatencyBudgetStrategy",
    "MaxThroughputStrategy",
    "MinLatencyStrategy",
    "OneBackendStrategy",
    "TuneStrategy",
]
