"""Tuning one wrapped module on the calls it already recorded: ``tune`` without the gathering.

``tune`` gathers by running a function over a dataset; the JIT has no dataset, only
the live calls its wrappers recorded. Everything after gathering is ``tune``'s own, so
a JIT result is chosen, validated and reported exactly as a ``tune`` result is.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Any

import attrs

from aitune_core.backends.tolerances import Tolerances
from aitune_core.config import config
from aitune_core.executors.registry import resolve_executor
from aitune_core.log import get_logger
from aitune_core.module.router import Route
from aitune_core.module.wrapper import Module
from aitune_core.reporting.summary import TuneReport
from aitune_core.tuning import declared_specs, device_of, strategy_for, tune_module
from aitune_jit.placement import place


@attrs.frozen
class Tuned:
    routes: dict[Hashable, Route]
    report: TuneReport
    tolerances: Tolerances | None
    """What the strategy validated with, on top of each backend's own: the live check uses the same."""


def tune_recorded(module: Module, strategy: Any, executor: Any) -> Tuned:
    """Routes for every graph ``module`` recorded, and the report; the module itself is not routed yet.

    strategy: None chooses as ``tune`` does; executor: None builds in a child process where
    that keeps compiles out of this one (:mod:`aitune_jit.placement`), else as
    ``config.executor`` says.
    """
    started = time.perf_counter()
    device = device_of([module])
    placement = place(module.module, module.strategy or strategy, executor, device)
    get_logger(module=module.name).info("jit: building", where=placement.reason)
    chosen = strategy_for(module, placement.strategy, device)
    where, owned = resolve_executor(placement.executor if placement.executor is not None else config.executor)
    owned = owned or placement.owned
    report = TuneReport()
    try:
        routes = tune_module(module, chosen, device, report, where, declared_specs(module))
    finally:
        if owned:
            where.close()
    report.timings["total"] = time.perf_counter() - started
    return Tuned(routes, report, getattr(chosen, "tolerances", None))
