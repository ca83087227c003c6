"""The executor contract: where "build, validate and profile one candidate for one graph" runs.

Strategies decide which candidates to try and which one wins; executors decide where
each try happens. Keeping the two apart lets one strategy run its candidates in this
process (the default), each in a child process that may crash, hang or run out of
memory without taking the tuning down, or spread over a cluster, and still produce
the same summary rows and the same selection.

A strategy hands an executor a :class:`CandidateTask` and gets a
:class:`PendingCandidate` back at once; ``pending.result()`` gives the filled-in
:class:`~aitune_core.evaluate.candidate.CandidateResult`. Executors that can run
several candidates at a time say so with :meth:`Executor.max_parallel`; a strategy
that may look at all results before choosing submits them all before collecting any.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from aitune_core.config import accept_instances

if TYPE_CHECKING:
    from aitune_core.backends.base import Backend
    from aitune_core.evaluate.result import CandidateResult
    from aitune_core.evaluate.session import GraphSession


DEFAULT_TIMEOUT_S = 600.0
"""The time limit of one candidate run outside this process, unless the executor is given another.

Long enough for the builds of models up to a few GB (Inductor compiles take seconds to
minutes, TensorRT engines minutes); short enough that a hung compiler costs ten minutes,
not the half hour it used to. Pass ``timeout_s`` for larger models.
"""


class ExecutorError(RuntimeError):
    """An executor cannot be chosen or cannot run the graph at all (not one candidate's failure)."""


@attrs.define(eq=False)
class CandidateTask:
    """One candidate to try on the session's graph.

    blueprint: the backend as the user or a plugin gave it; executors build a copy.
    correctness_check: compare it with eager.
    raise_errors: a failure raises instead of being recorded (OneBackendStrategy).
    result: the summary row to fill in.
    log: a logger bound to the module, graph and backend.
    alongside: submitted with others before any result is awaited, so it may build beside
        them (the ``"auto"`` executor builds such candidates in child processes).
    """

    blueprint: Backend
    correctness_check: bool
    raise_errors: bool
    result: CandidateResult
    log: Any
    alongside: bool = False


class PendingCandidate(abc.ABC):
    """A candidate that was submitted; :meth:`result` waits for it."""

    @abc.abstractmethod
    def result(self) -> CandidateResult:
        """The filled-in result; raises only for ``raise_errors`` tasks that did not pass."""

    @abc.abstractmethod
    def done(self) -> bool:
        """Whether :meth:`result` would return without waiting."""


class FinishedCandidate(PendingCandidate):
    """A candidate whose result is already known (it ran synchronously, or could not start)."""

    def __init__(self, result: CandidateResult) -> None:
        self._result = result

    def result(self) -> CandidateResult:
        return self._result

    def done(self) -> bool:
        return True


class Executor(abc.ABC):
    """Runs candidates for strategies. Subclasses set ``name`` and implement :meth:`submit`.

    An executor may be used for many graphs in a row; :meth:`end_graph` is called when a
    graph is done (to drop what was shipped for it), and :meth:`close` when the tuning
    run that created it ends. Executors chosen by name are created with no arguments,
    so every option needs a default.
    """

    name: ClassVar[str] = ""

    def max_parallel(self, session: GraphSession) -> int:
        """How many candidates of this graph may run at once; 1 runs them one after another.

        It takes the graph because what runs in parallel can depend on its device (a
        cluster may have many CPU slots and few GPUs).
        """
        return 1

    def describe(self) -> str:
        return self.name or type(self).__name__

    @abc.abstractmethod
    def submit(self, session: GraphSession, task: CandidateTask) -> PendingCandidate:
        """Start the candidate (or queue it) and return at once."""

    def restore(self, session: GraphSession, result: CandidateResult, validate: bool) -> Backend:
        """Make the winner a live, ACTIVE backend in this process.

        ``validate``: check it against eager here before it serves (out-of-process
        executors do, since what runs here was not the object that was validated).
        """
        if result.instance is None:
            raise ExecutorError(f"{result.backend} has no live backend in this process to select")
        return result.instance

    def end_graph(self, session: GraphSession) -> None:
        """The strategy is done with this graph: cancel what is still running, drop what was shipped."""

    def close(self) -> None:
        """Release workers and connections; the executor is not used again."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


accept_instances("executor", Executor)  # config.executor = SubprocessExecutor(...) as well as a name
