"""The default executor: every candidate runs right here, one after another.

This is what tuning always did: the backend that passed is the very object that
serves afterwards, nothing is copied or shipped, and a failing build raises its
original exception where OneBackendStrategy wants it. The price is that a candidate
which crashes the interpreter (a segfault in a compiler, ``os.abort()``) or hangs
takes the tuning with it; the ``subprocess`` executor is there for that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.evaluate.candidate import run_candidate
from aitune_core.executors.base import CandidateTask, Executor, FinishedCandidate, PendingCandidate
from aitune_core.executors.progress import running_build

if TYPE_CHECKING:
    from aitune_core.evaluate.session import GraphSession


class InProcessExecutor(Executor):
    """Builds, validates and profiles each candidate in this process, synchronously."""

    name = "inprocess"

    def submit(self, session: GraphSession, task: CandidateTask) -> PendingCandidate:
        with running_build(
            f"{session.module_name}/{session.graph.name}: {task.result.backend}"
        ):  # counted, and never beside a timing of another thread
            run_candidate(
                session,
                task.blueprint,
                task.result,
                correctness_check=task.correctness_check,
                raise_errors=task.raise_errors,
                log=task.log,
            )
        return FinishedCandidate(task.result)
