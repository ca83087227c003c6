"""RemoteExecutor: what every executor that runs candidates outside this process shares.

A subclass only says how to ship a graph's payload to its workers (:meth:`ship`), how
to run one candidate there and wait for it (:meth:`run`), and, when workers do not
share this machine's disk, how to bring a winner's artifacts back
(:meth:`fetch_artifacts`). This class does the rest the same way for all of them:

* per graph, a pool of :meth:`max_parallel` threads, each waiting on one candidate, so
  that up to that many run at once and the time limit of each starts when it is handed
  to a worker, not when the strategy queued it; with a fixed number of ``workers``, that
  many at once over all graphs, so graphs submitted together share them;
* each running candidate holds this process's build gate (:mod:`..gate`): nothing is
  timed here while it builds, and it waits while something is timed;
* the graph is shipped once, lazily, at the first candidate (after the strategy's
  batch-size search, which may widen the graph's batch range);
* a worker's answer becomes the strategy's summary row here, on the strategy's thread,
  and the events the worker logged for it are shown here (see :mod:`.answer`);
* the winner is restored here: a JIT backend is rebuilt from its config, any other is
  made with ``from_dict`` from its artifacts and activated; either is then validated
  against eager here before it serves. Those steps run inside the session's module
  guard, as every step does in a worker, so a backend that changes the user's module
  fails here too, and the module is put back.

Nothing a worker does changes this process: the module, the plugin registry and the
cache folder of other candidates are untouched when a worker dies.
"""

from __future__ import annotations

import abc
import contextlib
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import attrs

from aitune_core.backends import folder_lifetime
from aitune_core.backends.artifacts import ArtifactChangedError, ArtifactSeal, seal, seal_passed, verify_files
from aitune_core.evaluate.candidate import release
from aitune_core.evaluate.result import CandidateFailedError, CandidateRejectedError
from aitune_core.executors.base import CandidateTask, Executor, ExecutorError, FinishedCandidate, PendingCandidate
from aitune_core.executors.isolated.answer import Answer
from aitune_core.executors.isolated.payload import GraphPayload, UnshippableBackendError, backend_ref
from aitune_core.executors.progress import running_build

if TYPE_CHECKING:
    from aitune_core.backends.base import Backend
    from aitune_core.evaluate.result import CandidateResult
    from aitune_core.evaluate.session import GraphSession


@attrs.define(eq=False)
class Shipment:
    """One graph as shipped to the workers, the threads waiting on them, and the candidates running."""

    handle: Any
    pool: ThreadPoolExecutor
    graph_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    futures: list[Future[Answer]] = attrs.field(factory=list)
    fetches: dict[int, Any] = attrs.field(factory=dict)


class RemoteExecutor(Executor):
    """Runs each candidate in a worker outside this process, ``workers`` at a time.

    workers: candidates running at once. Their timings are compared with each other,
        so on one machine keep this at or below what the machine runs without
        contention (one per GPU; a few per CPU socket). None: the subclass decides
        (:meth:`max_parallel`), else 1.
    timeout_s: the most one candidate may take, from when it starts; None: no limit.
    """

    def __init__(self, workers: int | None = 1, timeout_s: float | None = 1800.0) -> None:
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a whole number of at least 1 (or None), got {workers!r}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive or None, got {timeout_s!r}")
        self.workers = workers
        self.timeout_s = timeout_s
        self._shipments: dict[int, Shipment] = {}
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(workers) if workers is not None else None
        """Candidates running at once over all graphs; None: the workers' side decides."""

    def max_parallel(self, session: GraphSession) -> int:
        return self.workers or 1

    def describe(self) -> str:
        count = "auto" if self.workers is None else str(self.workers)
        limit = f", timeout {self.timeout_s:g} s" if self.timeout_s else ""
        return f"{self.name} ({count} worker{'s' if self.workers != 1 else ''}{limit})"

    # ------------------------------------------------------------------ to implement
    @abc.abstractmethod
    def ship(self, session: GraphSession, payload: GraphPayload) -> Any:
        """Make ``payload`` available to workers; returns the handle :meth:`run` gets."""

    @abc.abstractmethod
    def run(self, handle: Any, candidate: dict[str, Any]) -> Answer:
        """Run one candidate in a worker and wait for it (on a pool thread).

        Enforce ``timeout_s`` from the moment the candidate starts. A crash, a timeout or
        a lost worker is a failed answer (:meth:`Answer.failed`), never an exception.
        Set the answer's ``fetch`` to what :meth:`fetch_artifacts` needs later.
        """

    def unship(self, handle: Any) -> None:
        """Drop what :meth:`ship` made; called when the graph is done."""

    def cancel(self, handle: Any) -> None:
        """Stop candidates of this graph that are still running (the strategy stopped early)."""

    def cache_dir_for(self, session: GraphSession) -> str | None:
        """Where workers build; None lets each worker pick its own folder (no shared disk)."""
        return str(session.cache_dir)

    def fetch_artifacts(self, session: GraphSession, result: CandidateResult, fetch: Any) -> dict[str, str]:
        """The winner's artifact paths on this machine; by default the workers share its disk."""
        return dict((result.backend_data or {}).get("artifacts", {}))

    def candidate_options(self) -> dict[str, Any]:
        """Extra keys of every candidate payload (a memory limit, threads per worker)."""
        return {}

    # ------------------------------------------------------------------ Executor
    def submit(self, session: GraphSession, task: CandidateTask) -> PendingCandidate:
        try:
            reference = backend_ref(task.blueprint)
        except UnshippableBackendError as error:
            Answer.failed("start", str(error)).fill(task.result, task.log)
            _raise_if_asked(task)
            return FinishedCandidate(task.result)
        shipment = self._shipment(session)
        candidate = {
            "label": task.result.backend,
            "backend": reference,
            "correctness_check": task.correctness_check,
            "cache_dir": self.cache_dir_for(session),
            "graph_id": shipment.graph_id,
            **self.candidate_options(),
        }
        label = f"{session.module_name}/{session.graph.name}: {task.result.backend}"
        future = shipment.pool.submit(self._run_guarded, shipment.handle, candidate, label)
        shipment.futures.append(future)
        return _Pending(shipment, task, future)

    def slots(self) -> contextlib.AbstractContextManager[Any]:
        """Hold one of the ``workers`` places while a candidate runs (nothing to hold when the workers decide)."""
        return self._slots or contextlib.nullcontext()

    def _run_guarded(self, handle: Any, candidate: dict[str, Any], label: str) -> Answer:
        with self.slots(), running_build(label):
            try:
                return self.run(handle, candidate)
            except Exception as error:
                return Answer.failed("start", f"{self.name} executor error: {type(error).__name__}: {error}")

    def _shipment(self, session: GraphSession) -> Shipment:
        with self._lock:
            shipment = self._shipments.get(id(session))
            if shipment is None:
                start = time.perf_counter()
                try:
                    payload = GraphPayload.of(session)
                except Exception as error:
                    raise ExecutorError(
                        f"the {self.name} executor could not send module `{session.module_name}` to its workers "
                        f"({type(error).__name__}: {error}); its class must be importable by name in a fresh "
                        "interpreter (not defined in __main__ or a notebook), or use executor='inprocess'"
                    ) from error
                workers = self.max_parallel(session)
                pool = ThreadPoolExecutor(workers, thread_name_prefix=f"aitune-{self.name}")
                shipment = Shipment(self.ship(session, payload), pool)
                self._shipments[id(session)] = shipment
                session.log.info(
                    "graph shipped to workers",
                    executor=self.describe(),
                    workers=workers,
                    module_mb=round(len(payload.module) / 2**20, 2),
                    duration_s=round(time.perf_counter() - start, 3),
                )
            return shipment

    def restore(self, session: GraphSession, result: CandidateResult, validate: bool) -> Backend:
        data, blueprint = result.backend_data, result.blueprint
        if data is None or blueprint is None:
            raise ExecutorError(f"{result.backend} did not pass, so there is nothing to restore")
        start = time.perf_counter()
        guard = session.guard  # what ran in a worker is made again here, next to the user's own module
        artifacts: dict[str, str] = {}
        if data.get("is_jit"):  # code compiled in its worker's memory: compile it again here
            backend, step, how = blueprint.blueprint(), "build", "rebuilt from its config"
        else:
            shipment = self._shipments.get(id(session))
            fetch = shipment.fetches.get(id(result)) if shipment is not None else None
            artifacts = self.fetch_artifacts(session, result, fetch)
            backend = type(blueprint).from_dict({**data, "artifacts": artifacts})
            step, how = "activate", "loaded from its artifacts"
        context = session.context(backend)
        context.cache_dir.mkdir(parents=True, exist_ok=True)
        folder_lifetime.hold_artifacts(context, artifacts.values())  # the worker's build folder goes with the winner
        try:
            with guard.step(step):
                (backend.build if step == "build" else backend.activate)(context)
            if validate:
                tolerances = backend.default_tolerances().merged(session.tolerances)
                reference = session.reference
                with guard.step("validation"):
                    validation = reference.validate(backend, tolerances)
                if not validation.passed:
                    raise ExecutorError(f"restored here, it no longer matches eager: {validation.reason}")
            seal_restored(backend, data, result.backend)
        except Exception:
            release(backend, guard)
            raise
        duration_s = round(time.perf_counter() - start, 3)
        session.log.info(
            "winner restored", backend=result.backend, worker=result.worker, how=how, duration_s=duration_s
        )
        return backend

    def end_graph(self, session: GraphSession) -> None:
        with self._lock:
            shipment = self._shipments.pop(id(session), None)
        if shipment is None:
            return
        running = [future for future in shipment.futures if not future.cancel() and not future.done()]
        if running:
            session.log.info("stopping candidates still running", count=len(running))
            self.cancel(shipment.handle)
        self._discard(shipment)

    def _discard(self, shipment: Shipment) -> None:
        # Waits for the threads: each returns once its worker has been told to stop.
        shipment.pool.shutdown(wait=True, cancel_futures=True)
        self.unship(shipment.handle)

    def close(self) -> None:
        with self._lock:
            shipments, self._shipments = list(self._shipments.values()), {}
        for shipment in shipments:
            self.cancel(shipment.handle)
            self._discard(shipment)


class _Pending(PendingCandidate):
    """A candidate running in a worker; :meth:`result` makes its answer the summary row."""

    def __init__(self, shipment: Shipment, task: CandidateTask, future: Future[Answer]) -> None:
        self._shipment, self._task, self._future = shipment, task, future
        self._collected = False

    def done(self) -> bool:
        return self._collected or self._future.done()

    def result(self) -> CandidateResult:
        row = self._task.result
        if not self._collected:
            answer = self._future.result()
            answer.fill(row, self._task.log)
            if answer.fetch is not None:
                self._shipment.fetches[id(row)] = answer.fetch
            self._collected = True
            _raise_if_asked(self._task)
        return row


def _raise_if_asked(task: CandidateTask) -> None:
    if task.raise_errors and task.result.status == "rejected":
        raise CandidateRejectedError(task.result)
    if task.raise_errors and task.result.status == "failed":
        raise CandidateFailedError(task.result)


def seal_restored(backend: Backend, data: dict[str, Any], label: str) -> None:
    """Seal a winner restored here with what its worker validated.

    Its artifacts came back from the worker (the same files on a shared disk, copies
    otherwise); they must hold the bytes the worker sealed when the candidate passed,
    and ``save`` later checks them against that seal. A JIT backend rebuilt here has
    files of its own build, sealed as they are now.
    """
    sealed = data.get("seal")
    if data.get("is_jit") or sealed is None:
        seal_passed(backend)
        return
    worker_seal = ArtifactSeal.from_data(sealed)
    paths = {name: str(path) for name, path in backend.to_dict().get("artifacts", {}).items()}
    try:
        verify_files(worker_seal, paths, label)
    except ArtifactChangedError as error:
        raise ExecutorError(f"its artifacts are not what the worker validated: {error}") from None
    seal(backend, worker_seal.moved(paths))
