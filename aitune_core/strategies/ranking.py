"""Ranking the candidates that passed, at every batch size that will be served, and the routing plan.

All live candidates and eager are timed together in interleaved rounds at each
serving batch size (:func:`aitune_core.profiling.compare.compare`). At each size, a
candidate qualifies when the low end of its speedup's confidence interval clears the
gate; the fastest qualifier wins, and among qualifiers that the measurements cannot
tell apart the one earlier in priority order wins, so that noise does not flip the
choice from run to run. Sizes where nothing qualifies are eager's. Then a winner whose
every size another winner serves within :data:`ONE_RUNTIME_MARGIN` gives those sizes up,
the one whose stand-ins lose least first: one runtime's thread pool, memory and warm-up
per graph, where a second would gain less than the tune can rank.

The plan then merges neighbouring sizes with the same winner into batch ranges and
keeps at most ``max_backends`` backends per graph: those that gain the most over the
sizes they win. A size whose winner was dropped goes to the best kept qualifier, or
to eager.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from aitune_core.evaluate.result import CandidateResult, Status, describe_range
from aitune_core.evaluate.session import GraphSession
from aitune_core.profiling.budget import current_budget
from aitune_core.profiling.compare import BatchComparison, Variant, compare
from aitune_core.profiling.measurement import Measurement
from aitune_core.profiling.stats import Speedup
from aitune_core.profiling.timer import EAGER, Timer

Allowed = Callable[[CandidateResult, Measurement], bool]
"""Whether a candidate may serve a batch size, given what it measured there."""


@attrs.define(eq=False)
class Ranking:
    """The comparisons of one graph's candidates, by batch size (None: the graph has no batch axis)."""

    comparisons: dict[int | None, BatchComparison]
    names: dict[int, str]
    """Variant name of each ranked result, by ``id(result)``."""
    gate: float | None
    """None: performance validation is off, every candidate may serve and the fastest does."""

    @property
    def sizes(self) -> list[int | None]:
        return list(self.comparisons)

    def name(self, result: CandidateResult) -> str:
        return self.names[id(result)]

    def speedup(self, result: CandidateResult, size: int | None) -> Speedup:
        return self.comparisons[size].speedup(self.name(result))

    def verdict(self, result: CandidateResult, size: int | None) -> str:
        """``faster``/``slower``/``undecided`` against the gate; with no gate (performance validation off), faster."""
        if self.gate is None:
            return "faster"
        return self.speedup(result, size).verdict(self.gate)

    def measurement(self, result: CandidateResult, size: int | None) -> Measurement:
        return self.comparisons[size].measurement(self.name(result))


@attrs.frozen
class Segment:
    """Batches ``low..high`` (inclusive) go to ``winner``; None is eager. Both None: no batch axis."""

    low: int | None
    high: int | None
    winner: CandidateResult | None

    def describe(self) -> str:
        return describe_range(self.low, self.high)


def variant_names(results: list[CandidateResult]) -> dict[int, str]:
    """Unique names (``describe()``, then ``#2``, ``#3`` for repeats), never ``"eager"``."""
    names: dict[int, str] = {}
    taken = {EAGER}
    for result in results:
        name, count = result.backend, 1
        while name in taken:
            count += 1
            name = f"{result.backend}#{count}"
        taken.add(name)
        names[id(result)] = name
    return names


def rank(
    session: GraphSession,
    results: list[CandidateResult],
    sizes: list[int | None],
    gate: float | None,
    timer: Timer,
    never_wins: Callable[[CandidateResult], bool],
) -> Ranking:
    """Time eager and every result's live ``instance`` together at each of ``sizes``.

    Fills each result's ``sweep`` and ``speedups`` with what was measured and adds the
    time to its ``profile_s``. ``never_wins``: results that are eager themselves, timed
    for the table but not waited for.
    """
    names = variant_names(results)
    comparisons: dict[int | None, BatchComparison] = {}
    for size in sizes:
        call, samples = session.call_at(size)
        variants = [Variant(EAGER, session.module)] + [Variant(names[id(r)], _live(r)) for r in results]
        deciding = [names[id(r)] for r in results if not never_wins(r)]
        comparison = compare(
            variants, call, samples, session.profile_config, timer, gate or 0.0, deciding=deciding if gate else []
        )
        comparisons[size] = comparison
        share = comparison.timed_s[EAGER] if results else 0.0
        for result in results:
            name = names[id(result)]
            result.sweep.append(comparison.measurement(name))
            result.speedups[samples] = comparison.speedup(name)
            result.profile_s += comparison.timed_s[name] + share / len(results)
        session.eager_sweep.append(comparison.measurement(EAGER))
        budget = current_budget()
        session.log.info(
            "compared",
            batch_size=samples,
            rounds=comparison.round_count,
            retaken=comparison.retaken,
            outliers=comparison.outliers,
            **({"profiling": budget.describe()} if budget is not None else {}),
            eager=f"{comparison.measurement(EAGER).throughput:.1f}/s",
            **{names[id(r)]: comparison.speedup(names[id(r)]).describe() for r in results},
        )
    return Ranking(comparisons, names, gate)


Winners = dict[int | None, CandidateResult | None]
"""The winner at each batch size; None where eager serves."""


ONE_RUNTIME_MARGIN = 1.10
"""How much faster (the low end of its interval) a backend must be to take a size from one winning others.

"Winning others": other sizes of the graph, outright. Under this margin a second runtime
in the process does not pay for its thread pool, memory and warm-up, and at torch's
default threads the tune cannot rank two runtimes that close the way they serve: timm
resnet18 at batch 1 and two threads, ONNX Runtime measured 1.08x OpenVINO in the tune
and served 0.87x of it afterwards (docs/benchmarks.md, "At the user's threads").
"""


def _qualified(
    ranking: Ranking, size: int | None, contenders: list[CandidateResult], allowed: Allowed | None
) -> list[CandidateResult]:
    return [
        r
        for r in contenders
        if ranking.verdict(r, size) == "faster" and (allowed is None or allowed(r, ranking.measurement(r, size)))
    ]


def within(
    ranking: Ranking, size: int | None, contenders: list[CandidateResult], margin: float, allowed: Allowed | None = None
) -> list[CandidateResult]:
    """The fastest qualifier at ``size``, then those it is not measured ``margin`` times faster than."""
    qualified = _qualified(ranking, size, contenders, allowed)
    if not qualified:
        return []
    comparison = ranking.comparisons[size]
    best = max(qualified, key=lambda r: comparison.measurement(ranking.name(r)).throughput)
    near = [r for r in qualified if comparison.speedup(ranking.name(best), over=ranking.name(r)).low <= margin]
    return [best, *(r for r in near if r is not best)]


def winners(
    ranking: Ranking, contenders: list[CandidateResult], order: list[CandidateResult], allowed: Allowed | None = None
) -> Winners:
    """The winner at every ranked size, then as few backends as :data:`ONE_RUNTIME_MARGIN` allows."""
    won: Winners = {}
    for size in ranking.sizes:
        tied = within(ranking, size, contenders, 1.0, allowed)
        won[size] = min(tied, key=order.index) if tied else None
    return _fewer_runtimes(ranking, won, allowed)


def _fewer_runtimes(ranking: Ranking, won: Winners, allowed: Allowed | None) -> Winners:
    """Drop, one at a time, the backend whose every size another winner serves within the margin, losing least.

    What a drop loses is how much faster the dropped backend was than its stand-ins, not
    how much faster than eager: the backend that wins batch 1, where eager is slowest,
    has the largest gain over eager, and kept for that it took timm resnet18's batch 4
    and 32 from one 1.17x faster there (docs/benchmarks.md, "At the user's threads").
    """
    won = dict(won)
    while True:
        serving = list({id(w): w for w in won.values() if w is not None}.values())
        drops: list[tuple[float, dict[int | None, CandidateResult]]] = []
        for result in serving:
            taken = _stand_ins(ranking, result, [r for r in serving if r is not result], won, allowed)
            if taken is not None:
                drops.append((_loss(ranking, result, taken), taken))
        if not drops:
            return won
        won.update(min(drops, key=lambda drop: drop[0])[1])


def _stand_ins(
    ranking: Ranking, result: CandidateResult, others: list[CandidateResult], won: Winners, allowed: Allowed | None
) -> dict[int | None, CandidateResult] | None:
    """The fastest other winner within the margin at each size ``result`` wins; None if a size has none."""
    taken: dict[int | None, CandidateResult] = {}
    for size, winner in won.items():
        if winner is result:
            near = within(ranking, size, [result, *others], ONE_RUNTIME_MARGIN, allowed)
            stand_in = [r for r in near if r is not result]
            if not stand_in:
                return None
            taken[size] = stand_in[0]
    return taken


def _loss(ranking: Ranking, result: CandidateResult, taken: dict[int | None, CandidateResult]) -> float:
    """How much slower the stand-ins serve ``result``'s sizes: the sum of log slowdowns."""
    return sum(
        math.log(ranking.speedup(result, size).median / ranking.speedup(stand_in, size).median)
        for size, stand_in in taken.items()
    )


def plan(
    ranking: Ranking,
    uncapped: Winners,
    order: list[CandidateResult],
    max_backends: int,
    batch_range: tuple[int, int] | None,
    allowed: Allowed | None = None,
) -> list[Segment]:
    """Batch ranges and their winners (see the module docstring), from the :func:`winners` before the cap."""
    sizes = ranking.sizes
    chosen = {id(w): w for w in uncapped.values() if w is not None}
    capped = uncapped
    if len(chosen) > max_backends:
        kept = sorted(chosen.values(), key=lambda r: (-_gain(ranking, r, uncapped), order.index(r)))[:max_backends]
        capped = winners(ranking, kept, order, allowed)
    if batch_range is None or sizes == [None]:
        return [Segment(None, None, capped[sizes[0]])]
    segments: list[Segment] = []
    low = batch_range[0]
    ordered = sorted(s for s in sizes if s is not None)
    for index, size in enumerate(ordered):
        high = batch_range[1] if index == len(ordered) - 1 else size
        if low <= high:
            segments.append(Segment(low, high, capped[size]))
        low = high + 1
    return merge(segments)


def merge(segments: list[Segment]) -> list[Segment]:
    """Neighbouring ranges with the same winner, as one range."""
    merged: list[Segment] = []
    for segment in segments:
        if merged and merged[-1].winner is segment.winner:
            merged[-1] = Segment(merged[-1].low, segment.high, segment.winner)
        else:
            merged.append(segment)
    return merged


def _gain(ranking: Ranking, result: CandidateResult, won: Winners) -> float:
    """How much ``result`` speeds up the sizes it wins: the sum of log speedups."""
    return sum(math.log(ranking.speedup(result, size).median) for size, w in won.items() if w is result)


def lost_reason(
    ranking: Ranking,
    result: CandidateResult,
    gate: float,
    uncapped: Winners | None = None,
    max_backends: int = 0,
) -> tuple[Status, str]:
    """``(status, reason)`` of a candidate that serves no range: rejected at the gate, outrun, or capped.

    uncapped: the winner at each size before ``max_backends`` was applied.
    """
    uncapped = uncapped or {}
    verdicts = {size: ranking.verdict(result, size) for size in ranking.sizes}
    won = [_samples(ranking, size) for size in ranking.sizes if uncapped.get(size) is result]
    if won:
        return "passed", (
            f"fastest at batch {', '.join(map(str, won))}, but only {max_backends} backend"
            f"{'s' if max_backends != 1 else ''} per graph are kept (max_backends): those that gain most"
        )
    fastest = [
        _samples(ranking, size)
        for size in ranking.sizes
        if uncapped.get(size) is not None and _fastest_at(ranking, result, size)
    ]
    if fastest:
        return "passed", (
            f"fastest at batch {', '.join(map(str, fastest))}, but by less than {ONE_RUNTIME_MARGIN:.2f}x "
            "over a backend serving the graph's other sizes: one runtime serves them all"
        )
    if any(v == "faster" for v in verdicts.values()):
        return "passed", "others were faster at every batch size where it beat eager"
    size = max(ranking.sizes, key=lambda s: s or 0)
    outrun = ranking.comparisons[size].outrun.get(ranking.name(result))
    if outrun is not None and verdicts[size] != "slower":
        return "passed", f"out of the race at batch {_samples(ranking, size)}: {outrun}"
    speedup = ranking.speedup(result, size)
    at = f" at batch {_samples(ranking, size)}"
    if verdicts[size] == "undecided":
        noisy = max(ranking.comparisons[size].spread(n) for n in (EAGER, ranking.name(result)))
        return (
            "rejected",
            f"undecided: too noisy (p90/p50 = {noisy:.2f}){at}: {speedup.describe()} eager, "
            f"the {gate:.2f}x gate needs the low end above it",
        )
    return "rejected", f"{speedup.describe()} eager{at}, below the {gate:.2f}x gate"


def _fastest_at(ranking: Ranking, result: CandidateResult, size: int | None) -> bool:
    """Whether ``result`` qualified at ``size`` and measured the most throughput of all ranked there."""
    if ranking.verdict(result, size) != "faster":
        return False
    comparison = ranking.comparisons[size]
    best = max(comparison.measurement(name).throughput for name in ranking.names.values())
    return comparison.measurement(ranking.name(result)).throughput >= best


def _samples(ranking: Ranking, size: int | None) -> Any:
    return ranking.comparisons[size].batch_size


def _live(result: CandidateResult) -> Callable[..., Any]:
    if result.instance is None:
        raise ValueError(f"{result.backend} has no live backend to time")
    return result.instance
