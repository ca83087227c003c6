"""Timings for tests whose verdict must not depend on how busy the machine is.

A test of building, validating and routing sets ``config.timer = steady_timer()``:
every candidate then measures faster than eager by the same factor, so every one that
passes validation clears the gate and the first in priority order serves. A test of
the choice itself gives its own :class:`~aitune_core.profiling.timer.ScriptedTimer`.
"""

from __future__ import annotations

from aitune_core.profiling.timer import EAGER, ScriptedTimer

EAGER_LATENCY_S = 1e-3


def steady_timer(speedup: float = 2.0) -> ScriptedTimer:
    """Eager takes 1 ms per call and every candidate ``1 / speedup`` of that, at every batch size."""
    return ScriptedTimer({EAGER: EAGER_LATENCY_S}, default=EAGER_LATENCY_S / speedup)
