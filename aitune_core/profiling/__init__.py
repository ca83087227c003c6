"""Measuring latency and throughput."""

from aitune_core.graphs.batch_sizes import sweep_batch_sizes
from aitune_core.profiling.measurement import Measurement, ProfileConfig, measure
from aitune_core.profiling.sweep import search_max_batch

__all__ = ["Measurement", "ProfileConfig", "measure", "search_max_batch", "sweep_batch_sizes"]
