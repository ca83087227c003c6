"""Tuning one wrapped module on the calls it already recorded: ``tune`` without the gathering.

``tune`` gathers by running a function over a dataset; the JIT has no dataset, only
the live calls its wrappers recorded. Everything after gathering is ``tune``'s own, so
a JIT result is chosen, validated and reported exactly as a ``tune`` result is.

It is measured at this process's torch thread count, read when the tuning starts: the
count the model serves at, whatever it is (torch's own choice, in a script that never
sets one). The report and the stored checkpoint record it, as ``tune(..., threads=)``'s
do. The work done here is paced by serving calls (:mod:`aitune_jit.pacing`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Hashable, Iterator
from typing import Any

import attrs
import torch

from aitune_core.backends.tolerances import Tolerances
from aitune_core.config import config
from aitune_core.executors.registry import resolve_executor
from aitune_core.log import get_logger
from aitune_core.module.router import Route
from aitune_core.module.wrapper import Module
from aitune_core.profiling.timer import WallClock
from aitune_core.reporting.summary import TuneReport
from aitune_core.strategies.base import TuneStrategy
from aitune_core.threads import running_at
from aitune_core.tuning import declared_specs, device_of, strategy_for, tune_module
from aitune_jit.pacing import PacedGuard, PacedTimer
from aitune_jit.placement import place
from aitune_jit.serving import SERVING_CALLS, ServingCalls


@attrs.frozen
class Tuned:
    routes: dict[Hashable, Route]
    report: TuneReport
    tolerances: Tolerances | None
    """What the strategy validated with, on top of each backend's own: the live check uses the same."""
    threads: int
    """The torch thread count everything was built, validated and timed at."""


def tune_recorded(module: Module, strategy: Any, executor: Any, calls: ServingCalls = SERVING_CALLS) -> Tuned:
    """Routes for every graph ``module`` recorded, and the report; the module itself is not routed yet.

    strategy: None chooses as ``tune`` does; executor: None builds in a child process where
    that keeps compiles out of this one (:mod:`aitune_jit.placement`), else as
    ``config.executor`` says.
    """
    started = time.perf_counter()
    threads = torch.get_num_threads()  # what serving runs at: torch's setting is the process's
    device = device_of([module])
    placement = place(module.module, module.strategy or strategy, executor, device, threads)
    log = get_logger(module=module.name)
    log.info("jit: building", where=placement.reason, threads=threads)
    chosen = strategy_for(module, placement.strategy, device)
    where, owned = resolve_executor(placement.executor if placement.executor is not None else config.executor)
    owned = owned or placement.owned
    report = TuneReport(threads=threads)
    guard = PacedGuard(module.module, module.name, calls, log=log)
    try:
        with running_at(threads), paced(chosen, calls):
            routes = tune_module(module, chosen, device, report, where, declared_specs(module), guard)
    finally:
        if owned:
            where.close()
    report.timings["total"] = time.perf_counter() - started
    return Tuned(routes, report, getattr(chosen, "tolerances", None), threads)


@contextlib.contextmanager
def paced(strategy: TuneStrategy, calls: ServingCalls) -> Iterator[PacedTimer]:
    """``strategy`` times in the gaps between serving calls while the block runs; its own timer is kept inside."""
    given = strategy.timer
    timer = PacedTimer(given or config.timer or WallClock(), calls)
    strategy.timer = timer
    try:
        yield timer
    finally:
        strategy.timer = given
