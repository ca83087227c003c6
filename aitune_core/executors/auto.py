"""The default executor: in this process, or side by side in child processes where the machine allows.

Builds are most of a tuning run's time, and on a machine with several cores they can
run at once. How many is :func:`~aitune_core.executors.build_slots.parallel_builds`
(``config.parallel_builds``, else chosen from the cores and memory). With one, this
is the in-process executor, exactly. With more, candidates that a strategy submits
together (:attr:`CandidateTask.alongside`, every candidate of MaxThroughputStrategy)
are built side by side, that many at once:

* ahead-of-time candidates in child processes, each held to its share of the cores
  (:class:`~aitune_core.executors.isolated.subprocess_executor.SubprocessExecutor`), at
  background priority: the build here (usually the longest, a JIT compile) and this
  process's own work go first, and the children take the CPU time they leave; the
  winner is loaded here from its artifacts and validated against eager again;
* JIT candidates (Inductor JIT, eager itself) in this process, on one thread beside the
  children: their compiled code lives in the memory of the process that compiled it,
  so one built in a child would be compiled a second time here to serve.

Candidates tried one after another (FirstWins, OneBackend) stay in this process, where
a child would only add its start-up. A module that cannot travel to a child (its class
defined in ``__main__`` or a notebook) is tuned in this process, one candidate after
another.

Timings are taken here, never in a child, and never while a child builds (see
:mod:`aitune_core.executors.gate`).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import torch

from aitune_core.config import config
from aitune_core.executors.base import CandidateTask, Executor, ExecutorError, PendingCandidate
from aitune_core.executors.build_slots import Machine, parallel_builds, this_machine, threads_per_build
from aitune_core.executors.inprocess import InProcessExecutor
from aitune_core.executors.isolated.payload import cannot_travel
from aitune_core.executors.isolated.subprocess_executor import SubprocessExecutor

if TYPE_CHECKING:
    from aitune_core.backends.base import Backend
    from aitune_core.evaluate.result import CandidateResult
    from aitune_core.evaluate.session import GraphSession


class AutoExecutor(Executor):
    """In this process, or ``builds`` candidates at once in child processes (see the module docstring).

    builds: candidates built at once; None: ``config.parallel_builds``, else chosen for ``machine``.
    machine: the cores and memory to choose for; default: this machine's.
    """

    name = "auto"

    def __init__(self, builds: int | None = None, machine: Machine | None = None) -> None:
        machine = machine or this_machine()
        self.builds = builds if builds is not None else parallel_builds(machine, config.parallel_builds)
        self.inline = InProcessExecutor()
        self.children: SubprocessExecutor | None = None
        self._beside: ThreadPoolExecutor | None = None
        if self.builds > 1:
            self.children = SubprocessExecutor(
                workers=self.builds, threads=threads_per_build(machine, self.builds), background=True
            )
            # One thread: builds here share process-wide state (log handlers, warning filters).
            self._beside = ThreadPoolExecutor(1, thread_name_prefix="aitune-build")
        self._here: set[int] = set()
        """Sessions whose module cannot travel: tuned in this process."""

    def describe(self) -> str:
        if self.children is None:
            return "auto (in this process)"
        return f"auto ({self.builds} builds at once in child processes)"

    def _children_for(self, session: GraphSession) -> SubprocessExecutor | None:
        if self.children is None or id(session) in self._here:
            return None
        where = cannot_travel(session.module)
        if where is not None:
            self._here.add(id(session))
            session.log.info("building in this process", reason=f"a class of the module is defined in {where}")
            return None
        return self.children

    def max_parallel(self, session: GraphSession) -> int:
        return self.builds if self._children_for(session) is not None else 1

    def submit(self, session: GraphSession, task: CandidateTask) -> PendingCandidate:
        children = self._children_for(session) if task.alongside else None
        if children is None:
            return self.inline.submit(session, task)
        if task.blueprint.is_jit and self._beside is not None:
            grad = torch.is_grad_enabled()  # thread-local: the side thread builds as the tuning thread would
            return _Beside(self._beside.submit(self._build_here, children, session, task, grad))
        try:
            return children.submit(session, task)
        except ExecutorError as error:  # the module could not be written for a child: build here instead
            self._here.add(id(session))
            session.log.info("building in this process", reason=str(error))
            return self.inline.submit(session, task)

    def _build_here(
        self, children: SubprocessExecutor, session: GraphSession, task: CandidateTask, grad: bool
    ) -> CandidateResult:
        """Build in this process, on the side thread, taking one of the children's places while it does."""
        with children.slots(), torch.set_grad_enabled(grad):
            return self.inline.submit(session, task).result()

    def restore(self, session: GraphSession, result: CandidateResult, validate: bool) -> Backend:
        if result.instance is not None or self.children is None:
            return self.inline.restore(session, result, validate)
        return self.children.restore(session, result, validate)

    def end_graph(self, session: GraphSession) -> None:
        self._here.discard(id(session))
        if self.children is not None:
            self.children.end_graph(session)

    def close(self) -> None:
        if self._beside is not None:
            self._beside.shutdown(wait=True, cancel_futures=True)
        if self.children is not None:
            self.children.close()


class _Beside(PendingCandidate):
    """A candidate building in this process, on the side thread."""

    def __init__(self, future: Future[CandidateResult]) -> None:
        self._future = future

    def result(self) -> CandidateResult:
        return self._future.result()

    def done(self) -> bool:
        return self._future.done()
