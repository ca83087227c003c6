"""``inspect``: run a workload, time every submodule, and say which ones to wrap.

The first wall a new user hits with a model they did not write is finding what to
tune. ``inspect`` runs the workload as ``tune`` would (same dataset forms, same batch
sizes), times each module down to ``max_depth``, and reports the tree with calls,
time, share of the workload, parameters and the graphs each module would be tuned as.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.data import check_batch_sizes, samples_generator
from aitune_core.extensions import ensure_plugins
from aitune_core.inspection.module_timer import ModuleTimer, ModuleTiming
from aitune_core.inspection.report import InspectReport, ModuleRow

__all__ = ["InspectReport", "ModuleRow", "inspect"]


def inspect(
    func: Callable[..., Any],
    dataset: Any,
    max_depth: int = 3,
    batch_sizes: Sequence[int] | None = None,
    max_num_batches_per_batch_size: int | None = None,
    model: nn.Module | None = None,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> InspectReport:
    """Time the modules ``func`` runs on ``dataset`` and return the report (``print`` it, or ``.suggest()``).

    func: a model, or a function that calls one or more models.
    model: the model whose submodule paths the report uses (and :func:`aitune_core.wrap`
        takes). Default: ``func`` when it is a model, else the models ``func`` calls,
        found on its first call (several are labelled by their class names).
    warmup: calls made before timing starts (first calls allocate and compile).
    clock: seconds, as ``time.perf_counter`` gives them (tests inject their own).
    The dataset and batch sizes are taken as :func:`aitune_core.tune` takes them.
    """
    if not callable(func):
        raise TypeError(f"func must be callable (a model or a function calling it), got {type(func).__name__}")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError(f"max_depth must be a whole number >= 0, got {max_depth!r}")
    sizes = check_batch_sizes(batch_sizes)
    ensure_plugins()  # calls are keyed as Module keys them, plugins' parts included
    calls = list(samples_generator(dataset, sizes, max_num_batches_per_batch_size))
    with torch.no_grad():
        for batch_size, args, kwargs in calls[: max(0, warmup)]:
            _call(func, batch_size, args, kwargs)
        roots = [("", model)] if model is not None else _roots(func, calls[0])
        timers = [ModuleTimer(root, max_depth, root_name=label, clock=clock) for label, root in roots]
        workload_s = 0.0
        with contextlib.ExitStack() as hooks:
            for timer in timers:
                hooks.enter_context(timer.hooked())
            for batch_size, args, kwargs in calls:
                start = clock()
                _call(func, batch_size, args, kwargs)
                workload_s += clock() - start
    timings: list[ModuleTiming] = []
    for (label, _root), timer in zip(roots, timers, strict=True):
        for timing in timer.timings.values():
            if label and timing.path != label:
                timing.path = f"{label}.{timing.path}"
            timings.append(timing)
    return InspectReport.from_timings(timings, len(calls), workload_s)


def _call(func: Callable[..., Any], batch_size: int | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    with global_context:
        global_context.set(BATCH_SIZE_KEY, batch_size)
        return func(*args, **kwargs)


def _roots(
    func: Callable[..., Any], first: tuple[int | None, tuple[Any, ...], dict[str, Any]]
) -> list[tuple[str, nn.Module]]:
    """``func`` itself when it is a model; else the outermost modules its first call runs, labelled."""
    if isinstance(func, nn.Module):
        return [("", func)]
    found: list[nn.Module] = []
    depth = [0]

    def enter(module: nn.Module, _args: Any) -> None:
        if depth[0] == 0 and all(module is not seen for seen in found):
            found.append(module)
        depth[0] += 1

    def leave(_module: nn.Module, _args: Any, _output: Any) -> None:
        depth[0] -= 1

    pre = torch.nn.modules.module.register_module_forward_pre_hook(enter)
    post = torch.nn.modules.module.register_module_forward_hook(leave, always_call=True)
    try:
        _call(func, *first)
    finally:
        pre.remove()
        post.remove()
    if not found:
        raise ValueError("func called no torch.nn.Module on the first sample; inspect times the modules it calls")
    if len(found) == 1:
        return [("", found[0])]
    labels: list[str] = []
    for module in found:
        label = type(module).__name__
        labels.append(label if label not in labels else f"{label}{len(labels)}")
    return list(zip(labels, found, strict=True))
