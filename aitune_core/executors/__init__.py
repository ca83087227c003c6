"""Executors: where candidates are built, validated and profiled.

* ``"inprocess"`` (the default): here, one after another, as tuning always did.
* ``"subprocess"``: each candidate in a fresh child process with a time limit and an
  optional memory limit, so a crash, a hang or running out of memory is one failed
  candidate rather than a failed tuning.
* plugins add more, such as ``"ray"`` from the ``aitune-ray`` distribution.

Choose one with ``tune(..., executor="subprocess")``, ``aitune_core.config.executor``
or an instance: ``tune(..., executor=SubprocessExecutor(timeout_s=60))``.
"""

from aitune_core.executors.base import (
    CandidateTask,
    Executor,
    ExecutorError,
    FinishedCandidate,
    PendingCandidate,
)
from aitune_core.executors.inprocess import InProcessExecutor
from aitune_core.executors.registry import executor_names, get_executor_class, resolve_executor

__all__ = [
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


def __getattr__(name: str) -> object:
    # Out-of-process executors pull in threads and payload code that in-process tuning never needs.
    if name == "SubprocessExecutor":
        from aitune_core.executors.isolated.subprocess_executor import SubprocessExecutor

        return SubprocessExecutor
    if name == "RemoteExecutor":
        from aitune_core.executors.isolated.remote import RemoteExecutor

        return RemoteExecutor
    raise AttributeError(f"module 'aitune_core.executors' has no attribute {name!r}")
