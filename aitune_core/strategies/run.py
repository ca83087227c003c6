"""GraphRun: one graph's tuning by a strategy, and everything that tuning gathers.

A strategy is configuration (its candidates, gate, tolerances, profile, timer); what
one graph's tuning finds (the candidates tried, the rows of the summary, which batch
ranges go to which backend, where eager serves) lives here, in an object made for that
graph. So one strategy instance can tune several graphs at once, from several threads,
each with its own run, and each graph's routes are what they would be on their own.

``TuneStrategy.start`` makes the run, :meth:`GraphRun.tune` drives the strategy's
``_pre_tune``/``_tune``/``_post_tune`` on it, and the helpers below are what ``_tune``
calls: build a copy of a candidate and validate it against eager
(:meth:`GraphRun.evaluate`), compare the ones that passed with eager at every serving
batch size and route each range to its winner (:meth:`GraphRun.route_by_batch`).
Custom strategies get the same checks and the same summary rows for free.

Where a candidate runs is the executor's business (:mod:`aitune_core.executors`):
:meth:`GraphRun.evaluate` tries one and waits for it, and :meth:`GraphRun.evaluate_all`
lets an executor run several at once when the strategy looks at every result before
choosing (``parallel_candidates``). ``tune()`` may submit a graph's candidates before
its turn (:meth:`GraphRun.submit_all`), so that the builds of every graph run
together; the graph's turn then collects them (:meth:`GraphRun.collect`). Timings hold
the process's build gate alone (:mod:`aitune_core.executors.gate`): no build runs beside them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from typing import Protocol

import torch

from aitune_core.backends.base import Availability, Backend
from aitune_core.backends.eager import TorchEagerBackend, is_plain_eager
from aitune_core.config import config
from aitune_core.evaluate.candidate import discard, failure_reason
from aitune_core.evaluate.result import CandidateResult, Status, describe_range
from aitune_core.evaluate.session import GraphSession
from aitune_core.executors.base import CandidateTask, Executor, PendingCandidate
from aitune_core.executors.gate import BUILD_GATE
from aitune_core.executors.inprocess import InProcessExecutor
from aitune_core.executors.progress import BUILD_PROGRESS
from aitune_core.executors.registry import resolve_executor
from aitune_core.guard import ModuleChangedError
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.strategies.defaults import skipped_as_lossy
from aitune_core.strategies.ranking import Allowed, Ranking, Segment, Winners, merge, plan, rank, winners


class TuneStrategy(Protocol):
    """What a run needs of its strategy (:class:`aitune_core.strategies.base.TuneStrategy`).

    A protocol, so that the strategy's module, which makes runs, is not imported by them.
    """

    @property
    def correctness_check(self) -> bool: ...

    @property
    def performance_validation(self) -> bool: ...

    @property
    def performance_gate(self) -> float: ...

    @property
    def max_backends(self) -> int: ...

    @property
    def parallel_candidates(self) -> bool: ...

    @property
    def profile_config(self) -> ProfileConfig: ...

    def offered(self, device: torch.device) -> list[tuple[Backend, Availability]]: ...

    def lost(self, run: GraphRun, result: CandidateResult, ranking: Ranking) -> tuple[Status, str]: ...

    def early_candidates(self, run: GraphRun) -> list[Backend] | None: ...

    def _pre_tune(self, run: GraphRun) -> None: ...

    def _tune(self, run: GraphRun) -> Backend: ...

    def _post_tune(self, run: GraphRun) -> None: ...


class GraphRun:
    """One graph being tuned by ``strategy``: its session, its rows, and the routes chosen.

    After :meth:`tune`, ``backend`` serves the largest batches, ``lower`` holds the
    batch ranges below it (``(up_to, backend or None for eager)``), ``eager_serves`` the
    ranges of ``lower`` that the original module serves, and ``results`` one row per
    candidate, in the order tried.
    """

    def __init__(self, strategy: TuneStrategy, session: GraphSession, owns_guard: bool = False) -> None:
        self.strategy = strategy
        self.session = session
        self.results: list[CandidateResult] = []
        self.lower: list[tuple[int, Backend | None]] = []
        self.eager_serves: list[tuple[int | None, int | None]] = []
        self.backend: Backend | None = None
        """The backend serving the largest batches (ACTIVE), once tuned or given up."""
        self.executor: Executor | None = None
        self.largest_batch: int | None = None
        """The largest batch size to compare at, when the strategy looked for it before the builds were submitted."""
        self.early: list[PendingCandidate] | None = None
        """Candidates submitted before the graph's turn (:meth:`submit_all`), collected by :meth:`collect`."""
        self._owns_guard = owns_guard
        self._uncapped: Winners = {}
        self._candidate_count = 0
        self._candidate_index = 0

    # ------------------------------------------------------------------ driving the strategy
    def tune(self, executor: Executor | None = None) -> Backend:
        """Run the strategy's steps on this graph and return the chosen backend (ACTIVE).

        executor: where candidates run; None takes ``config.executor`` for this graph only.
        """
        strategy, session = self.strategy, self.session
        with _graph_executor(executor) as chosen:
            self.executor = chosen
            start = time.perf_counter()
            try:
                strategy._pre_tune(self)
                backend = strategy._tune(self)
                strategy._post_tune(self)
            finally:
                BUILD_PROGRESS.submitted(self._candidate_index - self._candidate_count)  # planned, never submitted
                chosen.end_graph(session)
                if self._owns_guard:
                    session.guard.release()  # the strategy outlives the graph; the copy of the weights need not
        self.backend = backend
        session.log.info(
            "strategy finished", selected=backend.describe(), duration_s=round(time.perf_counter() - start, 3)
        )
        return backend

    # ------------------------------------------------------------------ candidates
    def candidates(self) -> list[Backend]:
        """The strategy's candidates available on this graph's device; the others are logged and recorded as skipped."""
        available = []
        for blueprint, availability in self.strategy.offered(self.session.device):
            if availability.available:
                available.append(blueprint)
            else:
                self.session.log.info("backend skipped", backend=blueprint.describe(), reason=availability.reason)
                stage = "lossy" if skipped_as_lossy(availability) else "availability"
                self.results.append(
                    CandidateResult(
                        blueprint.describe(),
                        "skipped",
                        stage,
                        availability.reason,
                        key=blueprint.key(),
                        blueprint=blueprint,
                    )
                )
        self._candidate_count = len(available)
        self._candidate_index = 0
        BUILD_PROGRESS.submitted(len(available))
        return available

    def evaluate(self, blueprint: Backend, raise_errors: bool = False) -> CandidateResult:
        """Build a copy of ``blueprint`` and validate it, and wait for it.

        Timing is not done here but in :meth:`route_by_batch`, with every candidate and
        eager interleaved, so that all are measured under the same conditions.

        The result's ``instance`` is the ACTIVE backend when every step passed in this
        process; an out-of-process executor leaves it None until :meth:`select` restores
        the winner here. With ``raise_errors``, a build or validation exception
        propagates (for OneBackendStrategy): unchanged in-process, as
        :class:`CandidateFailedError` or :class:`CandidateRejectedError` from elsewhere.
        """
        return self.submit(blueprint, raise_errors).result()

    def evaluate_all(self, blueprints: Iterable[Backend]) -> Iterator[CandidateResult]:
        """Evaluate every blueprint, yielding results in the order given.

        With the strategy's ``parallel_candidates`` and an executor that runs several at
        once, all are submitted before the first result is awaited; otherwise each is
        evaluated when the previous one has been consumed, exactly as a loop over
        :meth:`evaluate`.
        """
        if not self.strategy.parallel_candidates or self._executor().max_parallel(self.session) <= 1:
            for blueprint in blueprints:
                yield self.evaluate(blueprint)
            return
        pending = [self.submit(blueprint, alongside=True) for blueprint in blueprints]
        for item in pending:
            yield item.result()

    def submit_all(self, blueprints: Iterable[Backend]) -> None:
        """Submit every blueprint now, to be built beside each other (and other graphs'), and collected later."""
        self.early = [self.submit(blueprint, alongside=True) for blueprint in blueprints]

    def collect(self) -> list[CandidateResult]:
        """The results of what :meth:`submit_all` submitted, in the order submitted (waiting for each)."""
        assert self.early is not None, "collect() follows submit_all()"
        return [item.result() for item in self.early]

    def submit(self, blueprint: Backend, raise_errors: bool = False, alongside: bool = False) -> PendingCandidate:
        """Add a summary row for ``blueprint`` and hand it to the executor; returns at once where it can.

        alongside: other candidates are submitted before any result is awaited.
        """
        result = CandidateResult(blueprint.describe(), "failed", key=blueprint.key(), blueprint=blueprint)
        self.results.append(result)
        self._candidate_index += 1
        total = max(self._candidate_count, self._candidate_index)
        log = self.session.log.bind(backend=result.backend)
        log.info("candidate", progress=f"{self._candidate_index}/{total}")
        task = CandidateTask(
            blueprint=blueprint,
            correctness_check=self.strategy.correctness_check,
            raise_errors=raise_errors,
            result=result,
            log=log,
            alongside=alongside,
        )
        return self._executor().submit(self.session, task)

    def _executor(self) -> Executor:
        if self.executor is None:
            self.executor = InProcessExecutor()
        return self.executor

    # ------------------------------------------------------------------ comparing and routing
    def serving_sizes(self, extra: int | None = None) -> list[int | None]:
        """The batch sizes the user's data came in (plus ``extra``): where candidates are compared.

        None for a graph without a batch axis. With ``profile.sweep`` off, only the largest.
        """
        session = self.session
        if session.batch_range() is None:
            return [None]
        sizes = {sample.batch_size for sample in session.samples if sample.batch_size}
        sizes |= set(session.batch_range() or ())
        if extra is not None:
            sizes.add(extra)
        ordered: list[int | None] = list(sorted(sizes))
        return ordered if self.strategy.profile_config.sweep else ordered[-1:]

    def route_by_batch(
        self, results: list[CandidateResult], sizes: list[int | None], allowed: Allowed | None = None
    ) -> Backend:
        """Compare the ``results`` that passed with eager at ``sizes`` and route each batch range to its winner.

        Returns the backend serving the largest batches; the ranges below it are left in
        :attr:`lower` for the route. Candidates that serve no range are released, with
        their reason. ``allowed(result, measurement)``: whether it may serve that batch
        size at all (a latency budget, say). See :mod:`aitune_core.strategies.ranking`.
        """
        planned = self.plan_routes(results, sizes, allowed)
        if planned is None:
            return self.eager_fallback("no candidate built and validated")
        return self.route(*planned)

    def plan_routes(
        self, results: list[CandidateResult], sizes: list[int | None], allowed: Allowed | None = None
    ) -> tuple[list[Segment], Ranking] | None:
        """Time and plan as :meth:`route_by_batch` does, releasing the losers; None when none is live.

        For strategies that look at the plan before routing (FirstWins moves on when
        its candidate wins no batch range); :meth:`route` then applies it.
        """
        session, strategy = self.session, self.strategy
        live = [r for r in results if r.status == "passed" and self._make_live(r)]
        if not live:
            return None
        gate = strategy.performance_gate if strategy.performance_validation else None
        try:
            with BUILD_GATE.profiling(f"{session.module_name}/{session.graph.name}"), session.guard.step("profile"):
                ranking = rank(session, live, sizes, gate, session.timer, never_wins)
        except ModuleChangedError as changed:
            for result in live:
                result.status, result.stage, result.reason = "failed", changed.step, str(changed)
                self.discard(result)
            return None
        contenders = [r for r in live if not never_wins(r)]
        self._uncapped = winners(ranking, contenders, live, allowed)
        segments = plan(ranking, self._uncapped, live, strategy.max_backends, session.batch_range(), allowed)
        eager_row = next((r for r in live if never_wins(r)), None)
        if eager_row is not None:  # eager was a candidate too: its row serves eager's ranges
            segments = merge([Segment(s.low, s.high, s.winner or eager_row) for s in segments])
        serving = {id(s.winner) for s in segments if s.winner is not None}
        for result in live:
            if id(result) in serving:
                continue
            result.status, result.reason = strategy.lost(self, result, ranking)
            if result.status == "rejected" and not result.stage:
                result.stage = "performance"
            session.log.info("not serving", backend=result.backend, status=result.status, reason=result.reason)
            self.discard(result)
        return segments, ranking

    @property
    def uncapped(self) -> Winners:
        """The winner at each batch size of the last plan, before ``max_backends`` was applied."""
        return self._uncapped

    def route(self, segments: list[Segment], ranking: Ranking) -> Backend:
        """Make each segment's winner serve its range; returns the backend of the top range (eager where none)."""
        top = segments[-1]
        for segment in segments:
            if segment.winner is not None:
                segment.winner.serves.append((segment.low, segment.high))
        below = segments[:-1]
        if top.winner is None:
            reason = _eager_reason(segments, self.results, self.strategy.performance_gate)
            primary = self.eager_fallback(reason)
            self.results[-1].serves.append((top.low, top.high))
        else:
            primary = self.select(top.winner, top.high)
        for segment in below:
            if segment.winner is not None and segment.winner.status != "selected":
                self.select(segment.winner, segment.high)
        self.lower = [(s.high, s.winner.instance if s.winner else None) for s in below if s.high is not None]
        self.eager_serves = [(s.low, s.high) for s in below if s.winner is None]
        if self.eager_serves:
            self.session.log.info(
                "eager serves",
                ranges=", ".join(describe_range(*r) for r in self.eager_serves),
                reason="no candidate beat it by the gate there",
            )
        return primary

    def _make_live(self, result: CandidateResult) -> bool:
        """Restore a candidate that was built elsewhere, so that it is timed here with the others."""
        if result.instance is not None:
            return True
        try:
            result.instance = self._executor().restore(self.session, result, validate=self.strategy.correctness_check)
        except Exception as error:
            result.status = "failed"
            result.stage = error.step if isinstance(error, ModuleChangedError) else "restore"
            result.reason = failure_reason(error)
            self.session.log.warning("restore failed", backend=result.backend, reason=result.reason)
            return False
        return True

    # ------------------------------------------------------------------ outcomes
    def discard(self, result: CandidateResult) -> None:
        """Release a candidate that will not serve; its row fails if releasing it changed the user's module."""
        discard(result, guard=self.session.guard)

    def give_up(self, reason: str) -> Backend:
        """Leave the graph eager after its tuning raised: release what was built, keep the rows."""
        self.lower, self.eager_serves = [], []
        for result in self.results:
            if result.instance is not None:
                self.discard(result)
        self.backend = self.eager_fallback(reason)
        return self.backend

    def eager_fallback(self, reason: str) -> Backend:
        """Build the eager backend for this graph: the answer when no candidate qualifies."""
        session = self.session
        with session.guard.step("build"):  # a plugin's lifecycle hook runs here too
            backend = TorchEagerBackend().build(session.context(TorchEagerBackend()))
        self.results.append(
            CandidateResult("TorchEagerBackend()", "fallback", reason=reason, key=backend.key(), instance=backend)
        )
        session.log.info("falling back to eager", reason=reason)
        return backend

    def select(self, result: CandidateResult, largest: int | None = None) -> Backend:
        """Make ``result`` serve; a winner built elsewhere is restored here first.

        ``largest``: the largest batch it serves, where its row's numbers are taken.
        A winner that cannot be restored (or fails validation here) leaves the graph
        eager, with the reason in its row.
        """
        if not self._make_live(result):
            return self.eager_fallback(f"{result.backend} won but could not be restored here")
        assert result.instance is not None
        result.status = "selected"
        at = next((m for m in result.sweep if m.batch_size == largest), None) if largest else None
        if at is not None or result.sweep:
            result.measurement = at or result.sweep[-1]
            speedup = result.speedups.get(result.measurement.batch_size)
            validated = self.strategy.performance_validation
            result.speedup = speedup.median if speedup is not None and validated else None
        self.session.log.info(
            "selected",
            backend=result.backend,
            serves=result.describe_serves() or "every call",
            throughput=round(result.measurement.throughput, 2) if result.measurement else None,
            speedup=round(result.speedup, 3) if result.speedup else None,
        )
        return result.instance


@contextlib.contextmanager
def _graph_executor(executor: Executor | None) -> Iterator[Executor]:
    """``executor``, or else ``config.executor`` for one graph, closed after it when made for it."""
    if executor is not None:
        yield executor
        return
    chosen, owned = resolve_executor(config.executor)
    try:
        yield chosen
    finally:
        if owned:
            chosen.close()


def _eager_reason(segments: list[Segment], results: list[CandidateResult], gate: float) -> str:
    """Why eager serves the largest batches: the closest candidate's verdict there, or that none passed."""
    losers = [r for r in results if r.status in ("rejected", "passed") and r.stage == "performance"]
    if losers:
        return losers[0].reason
    if any(s.winner is not None for s in segments):
        return f"no candidate beat eager by the {gate:.2f}x gate at {segments[-1].describe()}"
    return "no candidate beat eager by the gate"


def never_wins(result: CandidateResult) -> bool:
    """Plain eager as a candidate is timed for the table, but serving it is serving eager."""
    return is_plain_eager(result.instance or result.blueprint)
