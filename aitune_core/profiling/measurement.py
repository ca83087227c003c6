"""Timing one call shape: a warmup, then adaptive measurement until the median settles.

Fixed iteration counts are either too short for slow models or waste seconds on fast
ones. Here measurement goes on in windows until the median moves by less than
``stability`` between windows (after ``min_time_s``), and never past ``max_time_s``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import attrs
import torch

from aitune_core.validation.inputs import CallInputs


@attrs.frozen
class ProfileConfig:
    """How long and how carefully to measure. The defaults keep a small CPU model under ~2 s."""

    warmup_iterations: int = 3
    window: int = 8
    min_time_s: float = 0.05
    max_time_s: float = 0.3
    stability: float = 0.03
    sweep: bool = True
    max_batch_search: bool = True
    max_batch_search_time_s: float = 5.0
    max_batch_size: int = 1024
    saturation: float = 1.05


@attrs.define
class Measurement:
    """Latency and throughput of one call shape."""

    batch_size: int
    median_ms: float
    p90_ms: float
    throughput: float
    iterations: int
    duration_s: float

    @property
    def summary(self) -> str:
        return f"{self.throughput:.2f} samples/s at batch {self.batch_size} (p50 {self.median_ms:.3f} ms)"


def _synchronizer(call: CallInputs) -> Callable[[], None]:
    for value in (*call.args, *call.kwargs.values()):
        if isinstance(value, torch.Tensor) and value.is_cuda:
            return torch.cuda.synchronize
    return lambda: None


def measure(fn: Callable[..., Any], call: CallInputs, config: ProfileConfig, batch_size: int) -> Measurement:
    """Time ``fn(*call.args, **call.kwargs)``; ``batch_size`` turns latency into throughput."""
    sync = _synchronizer(call)
    args, kwargs = call.args, call.kwargs
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(config.warmup_iterations):
            fn(*args, **kwargs)
        sync()
        latencies: list[float] = []
        previous: float | None = None
        begin = time.perf_counter()
        while True:
            for _ in range(config.window):
                tick = time.perf_counter()
                fn(*args, **kwargs)
                sync()
                latencies.append(time.perf_counter() - tick)
            elapsed = time.perf_counter() - begin
            median = statistics.median(latencies)
            if elapsed >= config.max_time_s:
                break
            if (
                previous is not None
                and elapsed >= config.min_time_s
                and abs(median - previous) <= config.stability * previous
            ):
                break
            previous = median
    latencies.sort()
    median = statistics.median(latencies)
    p90 = latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))]
    return Measurement(
        batch_size=batch_size,
        median_ms=median * 1e3,
        p90_ms=p90 * 1e3,
        throughput=batch_size / median if median > 0 else float("inf"),
        iterations=len(latencies),
        duration_s=time.perf_counter() - start,
    )
