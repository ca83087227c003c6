"""Where the JIT builds: in a child process when it can, so that serving never competes for the GIL.

A compile in a thread of the serving process holds the GIL for long stretches (its own
Python, and imports of the compiler stack), and serving calls wait: measured on the demo
CNN, the p99 call was 8 to 19 ms later than eager's while Inductor compiled in-process,
against 0.7 ms with AOT Inductor built by a child process. So, unless the user chose an
executor, the JIT builds out of process when both hold:

* the module can be sent: every class in it is importable by name in a fresh
  interpreter (not defined in ``__main__`` or a function), as the subprocess executor
  requires;
* it tunes with the default candidates, less those that would compile here anyway: a
  JIT-kind backend (Inductor JIT) built in a child compiles again when it is restored
  in this process, which is the stall that building elsewhere avoids. Some must remain
  besides eager.

Candidates the user named (``backends=``, ``strategy=``) build in-process unless an
executor is named too; everything else builds in-process, as ``tune`` does.

The child runs at background priority (``SCHED_IDLE``, see
:mod:`aitune_core.executors.isolated.priority`) from the moment it starts, imports
included: it uses only the CPU time that serving leaves, and a serving call that wakes up
takes its core back at once. One child per core builds at a time, up to one per
candidate: on the demo CNN at two threads, one child built AOT Inductor in 22 s, then
OpenVINO and ONNX Runtime in 6 s each, and the 1,500-call serving loop of ``python -m
bench jit_serving`` ended before the JIT had timed anything. Each runs at the serving
process's torch thread count, which
is what it builds for: Inductor specializes its kernels for the thread count at compile
time (at one thread, no parallel loops at all), so a child at one thread would build an
AOT candidate that serves on one core of two.
"""

from __future__ import annotations

import importlib
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.config import config
from aitune_core.executors.build_slots import usable_cores

DEFAULT_EXECUTORS = ("auto", "inprocess")
"""``config.executor`` values that mean no executor was chosen: the default, and tuning's old default."""


@attrs.frozen
class Placement:
    """The executor and strategy one module's tuning uses, and why; ``owned``: made here, closed after."""

    executor: Any
    strategy: Any
    reason: str
    owned: bool = False


def place(module: nn.Module, strategy: Any, executor: Any, device: torch.device, threads: int) -> Placement:
    """Where to build ``module``'s candidates (see module docstring); ``threads``: the serving process's count."""
    if executor is not None or config.executor not in DEFAULT_EXECUTORS:
        return Placement(executor, strategy, "where the executor asked for says")
    if strategy is not None:
        return Placement(None, strategy, "in-process, with the candidates asked for (executor='subprocess' moves them)")
    unsendable = _unsendable(module)
    if unsendable is not None:
        return Placement(None, None, f"in-process: {unsendable}")
    candidates = _defaults_built_elsewhere(device)
    if not candidates:
        return Placement(None, None, "in-process: every default candidate compiles where it serves")
    from aitune_core.executors.isolated.subprocess_executor import SubprocessExecutor
    from aitune_core.strategies.max_throughput import MaxThroughputStrategy

    names = ", ".join(blueprint.describe() for blueprint in candidates)
    at_once = min(len(candidates), usable_cores())
    child = SubprocessExecutor(workers=at_once, threads=threads, background=True)
    reason = f"in a child process at background priority, {threads} thread{'s' if threads != 1 else ''}"
    reason += f", {at_once} builds at a time: {names}" if at_once > 1 else f": {names}"
    return Placement(child, MaxThroughputStrategy(candidates), reason, owned=True)


def _compiles_here(backend: Any) -> bool:
    from aitune_core.backends.eager import is_plain_eager

    return bool(getattr(backend, "is_jit", False)) and not is_plain_eager(backend)


def _defaults_built_elsewhere(device: torch.device) -> list[Any]:
    """The available default candidates that a child can build and this process only loads."""
    from aitune_core.strategies.defaults import default_backends

    candidates = [blueprint for blueprint, availability in default_backends(device) if availability.available]
    kept = [blueprint for blueprint in candidates if not _compiles_here(blueprint)]
    return kept if any(not getattr(b, "is_jit", False) for b in kept) else []


def _unsendable(module: nn.Module) -> str | None:
    """Why a fresh interpreter could not rebuild ``module`` from its classes' names, or None."""
    for child in module.modules():
        cls = type(child)
        if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
            return f"{cls.__qualname__} is defined in {cls.__module__}, which a child process cannot import"
        try:
            found: Any = importlib.import_module(cls.__module__)
            for part in cls.__qualname__.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError):
            return f"{cls.__module__}.{cls.__qualname__} cannot be imported by name"
        if found is not cls:
            return f"{cls.__module__}.{cls.__qualname__} names another class than the one in the model"
    return None
