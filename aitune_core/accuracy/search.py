"""Which modules go lossy: each one's sensitivity alone, then a greedy combination under the budget.

The search knows nothing of backends: a module is an :class:`Option` (its lossless and
lossy time per call), and ``measure(modules)`` runs the whole pipeline on the held-out
data with exactly those modules lossy and returns the metric's drop. Modules are added
best speed gain per unit of drop first, the whole pipeline re-measured after each
addition, and an addition stays only while the drop stays within the budget: drops
do not add up (two tolerable errors can compound, or cancel), so each combination is
measured rather than predicted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from aitune_core.reporting.accuracy import AccuracyReport, SensitivityRow, TrialPoint

Measure = Callable[[frozenset[str]], float]
ShouldStop = Callable[[], str | None]


@attrs.frozen
class Option:
    """A module whose lossy backends beat its lossless winners: seconds per call of each, summed over its graphs."""

    module: str
    lossless_s: float
    lossy_s: float
    backends: tuple[str, ...]

    @property
    def saved_s(self) -> float:
        return self.lossless_s - self.lossy_s

    @property
    def speedup(self) -> float:
        return self.lossless_s / self.lossy_s if self.lossy_s > 0 else math.inf


def greedy_order(options: list[Option], drops: dict[str, float]) -> list[Option]:
    """Best time saved per unit of drop first; a module that costs nothing first of all, the largest saving first."""

    def key(option: Option) -> tuple[float, float, str]:
        drop = max(0.0, drops[option.module])
        efficiency = math.inf if drop == 0 else option.saved_s / drop
        return (-efficiency, -option.saved_s, option.module)

    return sorted(options, key=key)


def search(
    options: list[Option],
    measure: Measure,
    report: AccuracyReport,
    total_s: float,
    should_stop: ShouldStop,
    log: Any,
) -> frozenset[str]:
    """Fill ``report`` with the sensitivities and the trials; returns the modules chosen lossy.

    total_s: seconds per call of every wrapped module as the lossless routes serve it,
        the base of the estimated speedups.
    should_stop: a reason to stop measuring (the profiling cap spent), or None.
    """
    budget = report.max_drop
    by_name = {option.module: option for option in options}
    rows = {o.module: SensitivityRow(o.module, list(o.backends), o.speedup, o.saved_s * 1e3) for o in options}
    report.sensitivities = list(rows.values())

    def speedup(modules: frozenset[str]) -> float:
        saved = sum(by_name[m].saved_s for m in modules)
        return total_s / (total_s - saved) if total_s - saved > 0 else math.inf

    baseline = measure(frozenset())
    report.baseline_drop = report.final_drop = baseline
    report.trials.append(TrialPoint("lossless", [], 1.0, baseline, "baseline", kept=True))
    drops: dict[str, float] = {}
    for index, option in enumerate(options, start=1):
        stop = should_stop()
        if stop is not None:
            report.notes.append(f"Stopped before measuring every module's sensitivity: {stop}")
            break
        log.info("accuracy: sensitivity", module=option.module, progress=f"{index}/{len(options)}")
        alone = frozenset({option.module})
        drops[option.module] = rows[option.module].drop = measure(alone)
        report.trials.append(
            TrialPoint(f"only {option.module}", [option.module], speedup(alone), drops[option.module], "sensitivity")
        )
    chosen: frozenset[str] = frozenset()
    measured = [o for o in options if o.module in drops]
    for index, option in enumerate(greedy_order(measured, drops), start=1):
        row = rows[option.module]
        if drops[option.module] > budget:
            row.note = f"alone it drops {drops[option.module]:.4g} > {budget:g}"
            continue
        stop = should_stop()
        if stop is not None:
            report.notes.append(f"Stopped combining: {stop}")
            break
        trial = chosen | {option.module}
        log.info("accuracy: combining", add=option.module, progress=f"{index}/{len(measured)}")
        drop = measure(trial)
        kept = drop <= budget
        names = sorted(trial, key=[o.module for o in options].index)
        report.trials.append(TrialPoint(f"+ {option.module}", names, speedup(trial), drop, "combination", kept))
        if kept:
            chosen, report.final_drop = trial, drop
            row.chosen = True
        else:
            row.note = f"with {', '.join(sorted(chosen)) or 'nothing else'} the pipeline drops {drop:.4g} > {budget:g}"
    for option in options:
        if option.module not in drops:
            rows[option.module].note = "not measured"
    report.chosen = [o.module for o in options if o.module in chosen]
    return chosen
