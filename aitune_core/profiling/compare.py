"""Comparing variants at one batch size in interleaved rounds, until the verdicts are clear.

Timing one backend after another compares each with whatever the machine was doing at
the time: a compile finishing elsewhere, a neighbour's job, a turbo clock dropping.
Here every round times every variant (in a rotated order), for the same number of
calls under the same conditions, and a speedup is computed over the same rounds (see
:mod:`aitune_core.profiling.stats`).

What a comparison counts are clean rounds:

* A round in which a neighbour preempted this process (see
  :mod:`aitune_core.profiling.interference`) is retaken instead of counted, up to
  ``max_retakes`` of them, and its seconds do not count against ``max_time_s``; a
  round in which one variant was far slower than usual (a GC pause) is an outlier and
  is left out for every variant.
* Rounds go on until there are ``min_rounds`` clean ones (8 by default: enough for a
  90% interval from the second-smallest per-round ratio, so that no single round
  decides) and the verdicts are clear, or ``max_time_s`` of measuring is spent.
* Variants that are clearly out of the race (slower than the reference, or slower than
  another variant in nearly every round) stop being timed, and their rounds go to the
  close calls.
* A variant still undecided when ``max_time_s`` is spent, but far above the gate (its
  speedup and its median round both past :data:`~aitune_core.profiling.stats.FAR_FROM_GATE`
  times it), is measured on until decided, up to ``max_rounds`` clean rounds: a 2x
  backend never loses its batch range to eager because of one round. Near the gate,
  undecided stays undecided, and eager serves.
* The whole ``tune()`` has one cap on profiling time (:mod:`aitune_core.profiling.budget`):
  once it is spent, comparisons stop as soon as they have an interval at all.

The verdict is looked at only after ``min_rounds`` (and ``min_time_s``), then at twice
and four times as many rounds, and an early stop needs 98% confidence: stopping at the
first look that happens to agree would find differences that are not there.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

import attrs

from aitune_core.profiling.budget import current_budget
from aitune_core.profiling.interference import disturbed_rounds
from aitune_core.profiling.measurement import Measurement, ProfileConfig
from aitune_core.profiling.stats import (
    FAR_FROM_GATE,
    Speedup,
    outlier_rounds,
    paired_speedup,
    rounds_for_an_interval,
    spread,
)
from aitune_core.profiling.timer import EAGER, TimedRound, Timer
from aitune_core.validation.inputs import CallInputs

MAX_ROUNDS = 400
"""Rounds taken at most, retaken ones included, whatever the budget says."""
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
    """Every variant's clean rounds at one batch size, and the statistics drawn from them."""

    batch_size: int
    reference: str
    confidence: float
    per_round: dict[str, dict[int, float]]
    """Per variant, each kept round's median seconds per call, by round index (a variant
    that left the race has no value for the rounds after it left)."""
    calls: dict[str, list[float]]
    """Per variant, every timed call's seconds, in the rounds kept."""
    outliers: int = 0
    """Rounds left out because one variant was far slower than usual in them."""
    retaken: int = 0
    """Rounds left out because a neighbour disturbed them (and taken again)."""
    outrun: dict[str, str] = attrs.field(factory=dict)
    """Variants that left the race before the end, and why."""
    capped: bool = False
    """The tune's profiling cap was spent before this comparison had all it wanted."""
    timed_s: dict[str, float] = attrs.field(factory=dict)
    """Per variant, every second it was timed, in rounds kept or not: what profiling cost."""

    @property
    def rounds(self) -> dict[str, list[float]]:
        """Per variant, its kept rounds' median seconds per call, in order."""
        return {name: [values[i] for i in sorted(values)] for name, values in self.per_round.items()}

    def measurement(self, name: str) -> Measurement:
        values = self.per_round[name]
        return Measurement.of(self.calls[name], self.batch_size, median=statistics.median(values.values()))

    def paired(self, name: str, over: str | None = None) -> tuple[list[float], list[float]]:
        """The rounds both ``over`` (the reference by default) and ``name`` ran, as two aligned lists."""
        base, other = self.per_round[over or self.reference], self.per_round[name]
        common = sorted(set(base) & set(other))
        return [base[i] for i in common], [other[i] for i in common]

    def speedup(self, name: str, over: str | None = None) -> Speedup:
        """How much faster ``name`` is than ``over`` (the reference by default), over the rounds both ran."""
        reference, candidate = self.paired(name, over)
        # The point is the ratio of the two medians shown in the summary (a variant that left
        # the race has fewer rounds than eager); the interval is the paired rounds'.
        point = _ratio(self.per_round[over or self.reference].values(), self.per_round[name].values())
        if not reference:  # it left the race in rounds that were all left out: nothing pairs
            return Speedup(point, 0.0, math.inf)
        paired = paired_speedup(reference, candidate, self.confidence)
        return Speedup(point, min(paired.low, point), max(paired.high, point))

    def spread(self, name: str) -> float:
        """p90/p50 of ``name``'s rounds: what keeps a verdict undecided."""
        return spread(list(self.per_round[name].values()))

    @property
    def round_count(self) -> int:
        return len(self.per_round[self.reference])


@attrs.define
class _RoundLog:
    """Every round taken so far, kept or not."""

    seconds: dict[str, dict[int, float]]
    calls: dict[str, dict[int, list[float]]]
    shares: dict[str, dict[int, float | None]]
    waits: dict[str, dict[int, float | None]]
    timed_s: dict[str, dict[int, float]]

    @classmethod
    def of(cls, names: list[str]) -> _RoundLog:
        return cls(
            {n: {} for n in names},
            {n: {} for n in names},
            {n: {} for n in names},
            {n: {} for n in names},
            {n: {} for n in names},
        )

    def add(self, name: str, index: int, timed: TimedRound) -> None:
        self.seconds[name][index] = statistics.median(timed.latencies)
        self.calls[name][index] = timed.latencies
        self.shares[name][index] = timed.cpu_share
        self.waits[name][index] = timed.wait_share
        self.timed_s[name][index] = sum(timed.latencies)

    def spent_in(self, kept: BatchComparison) -> float:
        """Seconds measured in the rounds ``kept`` counts: retaken rounds do not use up ``max_time_s``."""
        return sum(self.timed_s[name][index] for name, rounds in kept.per_round.items() for index in rounds)


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
    settle = min(config.settle_calls, max(1, per_round - 1))
    judged = [name for name in (deciding if deciding is not None else names) if name != reference]
    least = rounds_for_an_interval(config.confidence)  # the budget never stops short of a verdict
    need = max(config.min_rounds, least)
    first_look = max(need, rounds_for_an_interval(EARLY_STOP_CONFIDENCE))
    budget = current_budget()
    log = _RoundLog.of(names)
    active = list(variants)
    outrun: dict[str, str] = {}
    looked, capped = 0, False
    for index in range(MAX_ROUNDS):
        shift = index % len(active)
        for variant in active[shift:] + active[:shift]:
            timer.switch()
            if settle > 0:
                timer.warm(variant.name, variant.fn, call, settle)
            timed = timer.time_round(variant.name, variant.fn, call, batch_size, per_round)
            log.add(variant.name, index, timed)
            if budget is not None:
                budget.charge(sum(timed.latencies))
        kept = _kept(log, reference, batch_size, config, outrun)
        count = kept.round_count
        if budget is not None and budget.exhausted and count >= least:
            capped = count < need or any(kept.speedup(n).verdict(gate) == "undecided" for n in _racing(active, judged))
            break
        if count < least or count == looked:  # a retaken round: nothing new to judge
            continue
        looked = count
        active = _race(kept, active, judged, reference, gate, outrun)  # from the first interval on
        if count < need:
            continue
        still = _racing(active, judged)
        spent = log.spent_in(kept)
        if spent < config.min_time_s:
            continue
        if _looks_now(count, first_look):
            early = attrs.evolve(config, confidence=max(config.confidence, EARLY_STOP_CONFIDENCE))
            if _decided(_kept(log, reference, batch_size, early, outrun), still, gate):
                break
        if spent >= config.max_time_s:
            far = [n for n in still if kept.speedup(n).verdict(gate) == "undecided" and _far_above(kept, n, gate)]
            if not far or count >= config.max_rounds:
                break
            stays = {reference, *far, *(n for n in still if kept.speedup(n).verdict(gate) == "faster")}
            active = [v for v in active if v.name in stays]
    result = _kept(log, reference, batch_size, config, outrun)
    if capped and budget is not None:
        budget.note_capped()
    return attrs.evolve(result, capped=capped)


def _ratio(reference: Any, candidate: Any) -> float:
    below = statistics.median(candidate)
    return statistics.median(reference) / below if below > 0 else math.inf


def _racing(active: list[Variant], judged: list[str]) -> list[str]:
    names = {v.name for v in active}
    return [name for name in judged if name in names]


def _race(
    kept: BatchComparison,
    active: list[Variant],
    judged: list[str],
    reference: str,
    gate: float,
    outrun: dict[str, str],
) -> list[Variant]:
    """``active`` without the variants that can no longer win: slower than the reference, or than the best.

    Variants that are not judged (eager itself as a candidate, timed for the table) stay
    as long as the race goes on: five rounds' interval of a copy of eager (their minimum
    and maximum ratio) would call it faster than eager in about one comparison in fifty.
    """
    still = _racing(active, judged)
    slower = {n for n in still if gate > 0 and kept.speedup(n).verdict(gate) == "slower"}
    contenders = [n for n in still if n not in slower]
    for name in slower:
        outrun[name] = f"slower than {reference} in {kept.speedup(name).describe()}"
    if contenders:
        best = max(contenders, key=lambda n: kept.measurement(n).throughput)
        for name in contenders:
            if name != best and kept.speedup(best, over=name).low > 1.0:
                outrun[name] = (
                    f"{best} was faster in every round but a few ({kept.speedup(best, over=name).describe()})"
                )
                slower.add(name)
    return [v for v in active if v.name not in slower]


def _far_above(kept: BatchComparison, name: str, gate: float) -> bool:
    """The speedup and the median round both far past the gate: more rounds will decide it, not noise."""
    reference, candidate = kept.paired(name)
    ratios = [r / c if c > 0 else math.inf for r, c in zip(reference, candidate, strict=True)]
    far = gate * FAR_FROM_GATE
    return kept.speedup(name).median >= far and statistics.median(ratios) >= far


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
    log: _RoundLog, reference: str, batch_size: int, config: ProfileConfig, outrun: dict[str, str]
) -> BatchComparison:
    """The rounds that count: without the disturbed ones (up to ``max_retakes``), then without outliers."""
    taken = sorted(log.seconds[reference])
    least = rounds_for_an_interval(config.confidence)
    disturbed = disturbed_rounds(log.shares, config.interference_threshold, log.waits)
    retaken = set(sorted(disturbed, key=lambda i: (-disturbed[i], i))[: config.max_retakes])
    clean = [i for i in taken if i not in retaken]
    severity: dict[int, float] = {}
    for values in log.seconds.values():
        mine = [i for i in clean if i in values]
        typical = statistics.median(values[i] for i in mine) if mine else 0.0
        for position in outlier_rounds([values[i] for i in mine]):
            index = mine[position]
            severity[index] = max(severity.get(index, 0.0), values[index] / typical if typical > 0 else math.inf)
    # Outliers are the exception: at most a quarter of the rounds go, the worst first.
    worst = sorted(severity, key=lambda index: -severity[index])
    dropped = set(worst[: max(0, min(len(clean) // 4, len(clean) - least))])
    keep = [i for i in clean if i not in dropped]
    # A variant that left the race in rounds all left out since keeps them: it has to be reported.
    rounds_of = {name: [i for i in keep if i in values] or sorted(values) for name, values in log.seconds.items()}
    return BatchComparison(
        batch_size=batch_size,
        reference=reference,
        confidence=config.confidence,
        per_round={name: {i: log.seconds[name][i] for i in rounds_of[name]} for name in log.seconds},
        calls={name: [t for i in rounds_of[name] for t in log.calls[name][i]] for name in log.seconds},
        outliers=len(dropped),
        retaken=len(retaken),
        outrun=dict(outrun),
        timed_s={name: sum(sum(calls) for calls in timed.values()) for name, timed in log.calls.items()},
    )


def _decided(comparison: BatchComparison, judged: list[str], gate: float) -> bool:
    return all(comparison.speedup(name).verdict(gate) != "undecided" for name in judged)
