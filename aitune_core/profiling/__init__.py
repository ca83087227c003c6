"""Measuring latency and throughput."""

from aitune_core.profiling.measurement import Measurement, ProfileConfig, measure
from aitune_core.profiling.sweep import search_max_batch, sweep_batch_sizes

__all__ = ["Measurement", "ProfileConfig", "measure", "search_max_batch", "sweep_batch_sizes"]
