"""Timing one call shape on its own: a warmup, then windows until the median settles.

Comparing backends is :mod:`aitune_core.profiling.compare`'s business (interleaved
rounds); this is for one variant alone, as the max-batch search of eager needs. Fixed
iteration counts are either too short for slow models or waste seconds on fast ones,
so measurement goes on in windows until the median moves by less than ``stability``
between windows (after ``min_time_s``), and never past ``max_time_s``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import attrs

from aitune_core.profiling.timer import EAGER, Timer, WallClock
from aitune_core.validation.inputs import CallInputs


@attrs.frozen
class ProfileConfig:
    """How long and how carefully to measure.

    warmup_iterations: untimed calls of each variant before timing it.
    window: the most calls of one variant in one round (fewer for slow calls, see
        ``round_time_s``); a round's value is the median of its calls.
    min_rounds: clean rounds before a comparison may stop (8: a 90% interval from the
        second-smallest per-round ratio, so that no one round decides a verdict).
    min_time_s, max_time_s: measured seconds per batch size before a comparison may
        stop, and at which it stops even when still undecided, unless a variant far
        above the gate is still undecided (see :mod:`aitune_core.profiling.compare`).
    max_rounds: clean rounds at most when measuring on for such a variant.
    max_retakes: rounds disturbed by neighbours that are retaken rather than counted,
        at most, per comparison; past that, disturbed rounds count like clean ones.
        Beside two bursty neighbours on two cores, about two rounds in three of four
        variants at two threads are disturbed: 48 leave about 24 clean ones.
    interference_threshold: where the run-queue wait is unknown, a round is disturbed
        when a variant got less than this share of its usual CPU time per wall second
        in it (a preemption).
    round_time_s: about how long one variant's part of a round takes.
    settle_calls: untimed calls of each variant at the start of each of its rounds, at
        most one fewer than the round's timed calls but at least one. The first calls
        after another variant ran refill the caches with this one's weights and wake its
        thread pool, which serving one graph call after call does not pay: at batch 1 of
        the demo MLP (8 MB of weights) the first three took 1.5-5x a settled call, and
        eager, which follows a backend that shares its weights, was favoured over every
        other variant. Even a slow call needs one: at two threads, resnet18's OpenVINO
        and ONNX Runtime pools woken for a lone timed call of batch 4 measured 0.88x and
        0.73x eager; after one settling call, 1.70x and 1.60x (about 1.5x served).
    confidence: of the interval around each speedup (0.9 = 90%).
    stability: for a single variant's measurement, how little the median may move.
    sweep: profile at every serving batch size, not only the largest.
    max_batch_search: also search the batch size past which eager's throughput stops
        growing, and measure there too (MaxThroughputStrategy).
    """

    warmup_iterations: int = 3
    window: int = 8
    min_rounds: int = 8
    min_time_s: float = 0.05
    max_time_s: float = 0.3
    max_rounds: int = 48
    max_retakes: int = 48
    interference_threshold: float = 0.85
    round_time_s: float = 0.005
    settle_calls: int = 3
    confidence: float = 0.9
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

    @classmethod
    def of(cls, latencies: list[float], batch_size: int, median: float | None = None) -> Measurement:
        """From per-call seconds; ``median`` overrides the median of the calls (a median of round medians)."""
        ordered = sorted(latencies)
        middle = statistics.median(ordered) if median is None else median
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return cls(
            batch_size=batch_size,
            median_ms=middle * 1e3,
            p90_ms=p90 * 1e3,
            throughput=batch_size / middle if middle > 0 else float("inf"),
            iterations=len(ordered),
            duration_s=sum(ordered),
        )


def measure(
    fn: Callable[..., Any],
    call: CallInputs,
    config: ProfileConfig,
    batch_size: int,
    timer: Timer | None = None,
    name: str = EAGER,
) -> Measurement:
    """Time ``fn(*call.args, **call.kwargs)``; ``batch_size`` turns latency into throughput."""
    timer = timer or WallClock()
    timer.warm(name, fn, call, config.warmup_iterations)
    latencies: list[float] = []
    previous: float | None = None
    while True:
        latencies += timer.time(name, fn, call, batch_size, config.window)
        elapsed = sum(latencies)
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
    return Measurement.of(latencies, batch_size)
