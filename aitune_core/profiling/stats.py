"""Statistics for comparing variants timed in interleaved rounds.

A speedup is the ratio of two medians taken over the same rounds, so it is exactly
the ratio of the throughputs printed next to it. Its confidence interval is a sign-test
interval of the per-round ratios: each round pairs the two variants, so load that
slowed every variant in one round slows both sides of its ratio and cancels, and the
interval needs no assumption about how timings are distributed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import attrs

TOO_WIDE = 1.5
"""The most the high end of a speedup's interval may exceed its low end (as a ratio) for any verdict."""
FAR_FROM_GATE = 1.2
"""An interval entirely this far beyond the gate decides whatever its width: every round agreed."""
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
        """``"faster"``: even the low end clears ``gate``; ``"slower"``: the high end does not; else ``"undecided"``.

        An interval wider than :data:`TOO_WIDE` near the gate decides nothing: timings
        that scattered say little, and a run that happened to land high must not win
        (nor one that landed low be called slower, which would misreport why eager
        serves). Far from the gate (beyond :data:`FAR_FROM_GATE` times it) width does not
        matter: 1.5x to 3x faster is faster however wide.
        """
        steady = self.high <= self.low * TOO_WIDE
        if self.low >= gate and (steady or self.low >= gate * FAR_FROM_GATE):
            return "faster"
        if self.high < gate and (steady or self.high <= gate / FAR_FROM_GATE):
            return "slower"
        return "undecided"

    def describe(self) -> str:
        return f"{self.median:.2f}x [{self.low:.2f}-{self.high:.2f}]"


def paired_speedup(reference: Sequence[float], candidate: Sequence[float], confidence: float) -> Speedup:
    """``median(reference) / median(candidate)`` over paired rounds, with a sign-test interval.

    The interval is that of the median per-round ratio ``reference[i] / candidate[i]``:
    the k-th smallest and k-th largest ratios, k the largest count for which fewer
    than k ratios fall on one side with probability at most ``(1 - confidence) / 2``
    under "no difference". It assumes nothing about how timings are distributed, and
    a bootstrap of a ratio of medians from 5 to 10 rounds was far too narrow: it called
    a copy of eager faster in 9 runs of 100. Constant data gives an exact interval.
    """
    if len(reference) != len(candidate) or not reference:
        raise ValueError("paired_speedup needs the same, non-zero number of rounds on both sides")
    point = _ratio(reference, candidate)
    ratios = sorted(r / c if c > 0 else float("inf") for r, c in zip(reference, candidate, strict=True))
    k = _sign_test_rank(len(ratios), (1.0 - confidence) / 2.0)
    if k == 0:
        return Speedup(point, 0.0, float("inf"))  # too few rounds to say anything at this confidence
    return Speedup(point, min(ratios[k - 1], point), max(ratios[len(ratios) - k], point))


def rounds_for_an_interval(confidence: float) -> int:
    """The fewest rounds whose sign-test interval at ``confidence`` is not unbounded (5 at 90%)."""
    count = 1
    while _sign_test_rank(count, (1.0 - confidence) / 2.0) == 0:
        count += 1
    return count


def _sign_test_rank(count: int, tail: float) -> int:
    """The largest k with P(Binomial(count, 1/2) < k) <= tail (0: no interval at all)."""
    k, below = 0, 0.0
    while k < count:
        chance = math.comb(count, k) / 2**count
        if below + chance > tail:
            break
        below += chance
        k += 1
    return k


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
