"""Comparing variants at one batch size in interleaved rounds, until the verdicts are clear.

Timing one backend after another compares each with whatever the machine was doing at
the time: a compile finishing elsewhere, a neighbour's job, a turbo clock dropping.
Here every round times every variant (in a rotated order), for the same number of
calls under the same conditions, and a speedup is computed over the same rounds (see
:mod:`aitune_core.profiling.stats`).

Rounds go on until every variant's speedup over the reference is decided against the
gate, or the time budget ``max_time_s`` is spent; what is still undecided then is
reported as such, with the spread that kept it so. The verdict is looked at only after
``min_rounds`` (at least 7, and ``min_time_s``), then at twice and four times as many
rounds, and an early stop needs 98% confidence: stopping at the first look that happens to agree
would find differences that are not there. Rounds in which one variant was far slower
than usual are outliers and are left out for every variant, so that one GC pause
cannot decide.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

import attrs

from aitune_core.profiling.measurement import Measurement, ProfileConfig
from aitune_core.profiling.stats import Speedup, outlier_rounds, paired_speedup, rounds_for_an_interval, spread
from aitune_core.profiling.timer import EAGER, Timer
from aitune_core.validation.inputs import CallInputs

MAX_ROUNDS = 400
EARLY_STOP_CONFIDENCE = 0.98
"""Looking at the verdict after many rounds and stopping at the first decided one would
call differences that are not there; an early stop needs this confidence, and is
looked at only after min_rounds (at least the 7 rounds this confidence needs), twice
that, four times that, and so on."""


@attrs.define
class Variant:
    """One thing to time: ``name`` is what reports and :class:`~aitune_core.profiling.timer.ScriptedTimer` use."""

    name: str
    fn: Callable[..., Any]


@attrs.define
class BatchComparison:
    """Every variant's rounds at one batch size, and the statistics drawn from them."""

    batch_size: int
    reference: str
    confidence: float
    rounds: dict[str, list[float]]
    """Per variant, each round's median seconds per call; outlier rounds removed."""
    calls: dict[str, list[float]]
    """Per variant, every timed call's seconds, in the rounds kept."""
    outliers: int = 0
    """Rounds left out because one variant was far slower than usual in them."""

    def measurement(self, name: str) -> Measurement:
        return Measurement.of(self.calls[name], self.batch_size, median=statistics.median(self.rounds[name]))

    def speedup(self, name: str, over: str | None = None) -> Speedup:
        """How much faster ``name`` is than ``over`` (the reference by default)."""
        return paired_speedup(self.rounds[over or self.reference], self.rounds[name], self.confidence)

    def spread(self, name: str) -> float:
        """p90/p50 of ``name``'s rounds: what keeps a verdict undecided."""
        return spread(self.rounds[name])

    @property
    def round_count(self) -> int:
        return len(self.rounds[self.reference])


def compare(
    variants: list[Variant],
    call: CallInputs,
    batch_size: int,
    config: ProfileConfig,
    timer: Timer,
    gate: float,
    reference: str = EAGER,
    deciding: list[str] | None = None,
) -> BatchComparison:
    """Time ``variants`` (one of them named ``reference``) at ``batch_size`` in interleaved rounds.

    deciding: the variants whose verdicts must be clear before stopping early; by
        default all but the reference (a copy of the reference never can be).
    """
    names = [variant.name for variant in variants]
    if reference not in names or len(set(names)) != len(names):
        raise ValueError(f"variants need unique names and one named {reference!r}, got {names}")
    for variant in variants:
        timer.warm(variant.name, variant.fn, call, config.warmup_iterations)
    per_round = _calls_per_round(variants, call, batch_size, config, timer)
    judged = [name for name in (deciding if deciding is not None else names) if name != reference]
    least = rounds_for_an_interval(config.confidence)  # the budget never stops short of a verdict
    first_look = max(config.min_rounds, rounds_for_an_interval(EARLY_STOP_CONFIDENCE))
    rounds: dict[str, list[float]] = {name: [] for name in names}
    calls: dict[str, list[list[float]]] = {name: [] for name in names}
    spent = 0.0
    for index in range(MAX_ROUNDS):
        shift = index % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            timed = timer.time(variant.name, variant.fn, call, batch_size, per_round)
            calls[variant.name].append(timed)
            rounds[variant.name].append(statistics.median(timed))
            spent += sum(timed)
        if spent >= config.max_time_s and index + 1 >= least:
            break
        enough = index + 1 >= config.min_rounds and spent >= config.min_time_s
        if enough and _looks_now(index + 1, first_look):
            early = attrs.evolve(config, confidence=max(config.confidence, EARLY_STOP_CONFIDENCE))
            if _decided(_kept(rounds, calls, reference, batch_size, early), judged, gate):
                break
    return _kept(rounds, calls, reference, batch_size, config)


def _looks_now(rounds: int, first: int) -> bool:
    look = max(first, 1)
    while look < rounds:
        look *= 2
    return look == rounds


def _calls_per_round(
    variants: list[Variant], call: CallInputs, batch_size: int, config: ProfileConfig, timer: Timer
) -> int:
    """Enough calls that a round of the slowest variant takes about ``round_time_s``, at most ``window``."""
    slowest = max(statistics.median(timer.time(v.name, v.fn, call, batch_size, 1)) for v in variants)
    if slowest <= 0:
        return config.window
    return max(1, min(config.window, math.ceil(config.round_time_s / slowest)))


def _kept(
    rounds: dict[str, list[float]],
    calls: dict[str, list[list[float]]],
    reference: str,
    batch_size: int,
    config: ProfileConfig,
) -> BatchComparison:
    count = len(rounds[reference])
    severity: dict[int, float] = {}
    for values in rounds.values():
        typical = statistics.median(values)
        for index in outlier_rounds(values):
            severity[index] = max(severity.get(index, 0.0), values[index] / typical if typical > 0 else math.inf)
    # Outliers are the exception: at most a quarter of the rounds go, the worst first.
    worst = sorted(severity, key=lambda index: -severity[index])
    dropped = set(worst[: max(0, min(count // 4, count - rounds_for_an_interval(config.confidence)))])
    keep = [i for i in range(count) if i not in dropped]
    return BatchComparison(
        batch_size=batch_size,
        reference=reference,
        confidence=config.confidence,
        rounds={name: [values[i] for i in keep] for name, values in rounds.items()},
        calls={name: [t for i in keep for t in timed[i]] for name, timed in calls.items()},
        outliers=len(dropped),
    )


def _decided(comparison: BatchComparison, judged: list[str], gate: float) -> bool:
    return all(comparison.speedup(name).verdict(gate) != "undecided" for name in judged)
