"""Measuring latency and throughput."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "sweep_batch_sizes": "aitune_core.graphs.batch_sizes",
    "Measurement": "aitune_core.profiling.measurement",
    "ProfileConfig": "aitune_core.profiling.measurement",
    "measure": "aitune_core.profiling.measurement",
    "search_max_batch": "aitune_core.profiling.sweep",
}

__all__ = ["Measurement", "ProfileConfig", "measure", "search_max_batch", "sweep_batch_sizes"]

__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"module 'aitune_core.profiling' has no attribute {name!r}"
)

if TYPE_CHECKING:
    from aitune_core.graphs.batch_sizes import sweep_batch_sizes
    from aitune_core.profiling.measurement import Measurement, ProfileConfig, measure
    from aitune_core.profiling.sweep import search_max_batch
