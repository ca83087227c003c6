"""Statistics for comparing variants timed in interleaved rounds.

A speedup is the ratio of two medians taken over the same rounds, so it is exactly
the ratio of the throughputs printed next to it. Its confidence interval comes from a
paired bootstrap: rounds are resampled as a whole, so load that slowed every variant
in one round slows both sides of the ratio and cancels. The resampling is seeded from
the data, so the same timings always give the same interval.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

import attrs

BOOTSTRAP_RESAMPLES = 400
OUTLIER_MADS = 6.0
"""A round further than this many (scaled) median absolute deviations above a
variant's median is an outlier: a GC pause or a preempted thread, not the backend."""


@attrs.frozen
class Speedup:
    """How much faster a variant is than another: the point value and its confidence interval."""

    median: float
    low: float
    high: float

    def verdict(self, gate: float) -> str:
        """``"faster"``: even the low end clears ``gate``; ``"slower"``: the high end does not; else ``"undecided"``."""
        if self.low >= gate:
            return "faster"
        if self.high < gate:
            return "slower"
        return "undecided"

    def describe(self) -> str:
        return f"{self.median:.2f}x [{self.low:.2f}-{self.high:.2f}]"


def paired_speedup(
    reference: Sequence[float], candidate: Sequence[float], confidence: float, resamples: int = BOOTSTRAP_RESAMPLES
) -> Speedup:
    """``median(reference) / median(candidate)`` over paired rounds of latencies, with a bootstrap interval."""
    if len(reference) != len(candidate) or not reference:
        raise ValueError("paired_speedup needs the same, non-zero number of rounds on both sides")
    point = _ratio(reference, candidate)
    count = len(reference)
    if count < 3:
        return Speedup(point, 0.0, float("inf"))  # too few rounds to say anything
    rng = random.Random(hash((count, round(sum(reference), 12), round(sum(candidate), 12))))
    ratios = []
    for _ in range(resamples):
        picks = [rng.randrange(count) for _ in range(count)]
        ratios.append(_ratio([reference[i] for i in picks], [candidate[i] for i in picks]))
    ratios.sort()
    tail = (1.0 - confidence) / 2.0
    low = ratios[int(tail * (resamples - 1))]
    high = ratios[int((1.0 - tail) * (resamples - 1))]
    return Speedup(point, min(low, point), max(high, point))


def _ratio(reference: Sequence[float], candidate: Sequence[float]) -> float:
    below = statistics.median(candidate)
    return statistics.median(reference) / below if below > 0 else float("inf")


def outlier_rounds(rounds: Sequence[float]) -> set[int]:
    """Indices of rounds far slower than the rest (see :data:`OUTLIER_MADS`)."""
    if len(rounds) < 5:
        return set()
    middle = statistics.median(rounds)
    spread = statistics.median(abs(value - middle) for value in rounds) * 1.4826
    limit = middle + OUTLIER_MADS * max(spread, 0.01 * middle)
    return {index for index, value in enumerate(rounds) if value > limit}


def spread(values: Sequence[float]) -> float:
    """p90 / p50 of ``values``: 1.0 is perfectly steady."""
    ordered = sorted(values)
    middle = statistics.median(ordered)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return p90 / middle if middle > 0 else float("inf")
