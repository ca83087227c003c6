"""Timings for tests whose verdict must not depend on how busy the machine is.

A test of building, validating and routing sets ``config.timer = steady_timer()``:
every candidate then measures faster than eager by the same factor, so every one that
passes validation clears the gate and the first in priority order serves. A test of
the choice itself gives its own :class:`~aitune_core.profiling.timer.ScriptedTimer`.
Such tests profile only as long as tuning needs to finish: :data:`FAST_PROFILE`.
"""

from __future__ import annotations

from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.profiling.timer import EAGER, ScriptedTimer

EAGER_LATENCY_S = 1e-3

FAST_PROFILE = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.001, max_time_s=0.01, max_batch_search=False)
"""Profiling that only has to finish, 1 to 10 ms a variant: for tests whose verdict comes from a
scripted timer or from no timing at all. No batch-size search, so graphs keep their recorded range."""

SHORT_PROFILE = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.005, max_time_s=0.03, max_batch_search=False)
"""As :data:`FAST_PROFILE`, with 5 to 30 ms a variant: more timed calls of a compiled backend."""


def steady_timer(speedup: float = 2.0) -> ScriptedTimer:
    """Eager takes 1 ms per call and every candidate ``1 / speedup`` of that, at every batch size."""
    return ScriptedTimer({EAGER: EAGER_LATENCY_S}, default=EAGER_LATENCY_S / speedup)
