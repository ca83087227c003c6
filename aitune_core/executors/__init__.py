"""Executors: where candidates are built, validated and profiled.

* ``"auto"`` (the default): here, one after another, as tuning always did, unless the
  machine can build several candidates at once: then those a strategy submits together
  are built side by side in child processes (``config.parallel_builds``), and timed here.
* ``"inprocess"``: here, one after another.
* ``"subprocess"``: each candidate in a fresh child process with a time limit and an
  optional memory limit, so a crash, a hang or running out of memory is one failed
  candidate rather than a failed tuning.
* plugins add more, such as ``"ray"`` from the ``aitune-ray`` distribution.

Choose one with ``tune(..., executor="subprocess")``, ``aitune_core.config.executor``
or an instance: ``tune(..., executor=SubprocessExecutor(timeout_s=60))``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "AutoExecutor": "aitune_core.executors.auto",
    "CandidateTask": "aitune_core.executors.base",
    "Executor": "aitune_core.executors.base",
    "ExecutorError": "aitune_core.executors.base",
    "FinishedCandidate": "aitune_core.executors.base",
    "PendingCandidate": "aitune_core.executors.base",
    "InProcessExecutor": "aitune_core.executors.inprocess",
    "RemoteExecutor": "aitune_core.executors.isolated.remote",
    "SubprocessExecutor": "aitune_core.executors.isolated.subprocess_executor",
    "executor_names": "aitune_core.executors.registry",
    "get_executor_class": "aitune_core.executors.registry",
    "resolve_executor": "aitune_core.executors.registry",
}
"""Names imported on first use: out-of-process executors pull in threads and payload code that in-process
tuning never needs."""

__all__ = [
    "AutoExecutor",
    "CandidateTask",
    "Executor",
    "ExecutorError",
    "FinishedCandidate",
    "InProcessExecutor",
    "PendingCandidate",
    "RemoteExecutor",
    "SubprocessExecutor",
    "executor_names",
    "get_executor_class",
    "resolve_executor",
]

__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"module 'aitune_core.executors' has no attribute {name!r}"
)

if TYPE_CHECKING:
    from aitune_core.executors.auto import AutoExecutor
    from aitune_core.executors.base import CandidateTask, Executor, ExecutorError, FinishedCandidate, PendingCandidate
    from aitune_core.executors.inprocess import InProcessExecutor
    from aitune_core.executors.isolated.remote import RemoteExecutor
    from aitune_core.executors.isolated.subprocess_executor import SubprocessExecutor
    from aitune_core.executors.registry import executor_names, get_executor_class, resolve_executor
