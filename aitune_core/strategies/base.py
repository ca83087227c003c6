"""TuneStrategy: how a graph's backend is chosen.

A strategy receives the graph, its recorded samples and the candidates (blueprints),
and returns one built, ACTIVE backend. Subclasses implement ``_tune(session)`` and may
extend ``_pre_tune(session)``/``_post_tune(session)``; the session
(:class:`~aitune_core.evaluate.candidate.GraphSession`) holds the module, the
graph, its samples, the device and the log. The shared steps (build a copy, validate against eager,
then compare with eager at every serving batch size and route each range to its
winner) live in :meth:`TuneStrategy.evaluate` and :meth:`TuneStrategy.route_by_batch`,
so custom strategies get the same checks and the same summary rows for free.

Where a candidate runs is the executor's business (:mod:`aitune_core.executors`):
:meth:`TuneStrategy.evaluate` tries one and waits for it, and
:meth:`TuneStrategy.evaluate_all` lets an executor run several at once when the
strategy looks at every result before choosing (``parallel_candidates``).
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import torch

from aitune_core.backends.base import Availability, Backend
from aitune_core.backends.eager import TorchEagerBackend, is_plain_eager
from aitune_core.backends.tolerances import Tolerances
from aitune_core.config import config
from aitune_core.evaluate.candidate import discard, failure_reason
from aitune_core.evaluate.result import CandidateResult, Status, describe_range
from aitune_core.evaluate.session import GraphSession
from aitune_core.executors.base import CandidateTask, Executor, PendingCandidate
from aitune_core.executors.inprocess import InProcessExecutor
from aitune_core.executors.registry import resolve_executor
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.guard import ModuleChangedError, ModuleGuard
from aitune_core.log import get_logger
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.profiling.timer import Timer, WallClock
from aitune_core.strategies.defaults import default_backends, skipped_as_lossy
from aitune_core.strategies.ranking import Allowed, Ranking, Segment, Winners, lost_reason, merge, plan, rank, winners

DEFAULT_PERFORMANCE_GATE = 1.01
DEFAULT_MAX_BACKENDS = 2


class TuneStrategy(abc.ABC):
    """Base of all strategies.

    backends: the candidates, in priority order. None takes the defaults that the
        installed plugins offer for the device, skipping unavailable ones with a reason.
    performance_gate: how much faster than eager a backend must be to replace it
        (1.01 = 1% faster).
    tolerances: per-dtype tolerances for comparing with eager, on top of each backend's own.
    profile: how long and how to measure.
    timer: where timings come from; the wall clock by default. Tests and benches pass a
        :class:`~aitune_core.profiling.timer.ScriptedTimer` with given latencies.
    max_backends: how many backends one graph may keep, each serving a batch range.
    """

    name: ClassVar[str] = "Tune Strategy"
    description: ClassVar[str] = ""
    parallel_candidates: ClassVar[bool] = False
    """Whether every candidate is tried whatever the others gave, so an executor may run them at once."""
    surfaces_errors: ClassVar[bool] = False
    """Whether ``tune()`` lets what this strategy raises through, instead of leaving the graph eager."""

    def __init__(
        self,
        backends: Sequence[Backend] | None = None,
        *,
        performance_gate: float = DEFAULT_PERFORMANCE_GATE,
        tolerances: Tolerances | None = None,
        profile: ProfileConfig | None = None,
        timer: Timer | None = None,
        max_backends: int = DEFAULT_MAX_BACKENDS,
    ) -> None:
        if backends is not None:
            backends = list(backends)
            for backend in backends:
                if not isinstance(backend, Backend):
                    raise TypeError(f"{type(self).__name__} takes Backend instances, got {type(backend).__name__}")
        if performance_gate <= 0:
            raise ValueError(f"performance_gate must be positive, got {performance_gate}")
        if isinstance(max_backends, bool) or not isinstance(max_backends, int) or max_backends < 1:
            raise ValueError(f"max_backends must be a whole number of at least 1, got {max_backends!r}")
        self.backends: list[Backend] | None = backends
        self.performance_gate = performance_gate
        self.tolerances = tolerances or Tolerances()
        self.profile_config = profile or ProfileConfig()
        self.timer = timer
        """Given here, or None: ``config.timer``, else the wall clock, when a graph is tuned."""
        self.max_backends = max_backends
        self.lower: list[tuple[int, Backend | None]] = []
        """The batch ranges below the returned backend's, for the route: ``(up_to, backend or None for eager)``."""
        self.eager_serves: list[tuple[int | None, int | None]] = []
        """The batch ranges of :attr:`lower` that the original module serves, for the report."""
        self._uncapped: Winners = {}
        self.correctness_check = True
        self.performance_validation = True
        self.results: list[CandidateResult] = []
        self.session: GraphSession | None = None
        self.executor: Executor | None = None
        self._candidate_count = 0
        self._candidate_index = 0

    # ------------------------------------------------------------------ switches
    def enable_correctness_check(self, enabled: bool) -> TuneStrategy:
        """Turn comparing candidates with eager on or off (on by default)."""
        self.correctness_check = bool(enabled)
        return self

    def enable_performance_validation(self, enabled: bool) -> TuneStrategy:
        """Turn eager baseline profiling, the performance gate and speedups on or off."""
        self.performance_validation = bool(enabled)
        return self

    def describe(self) -> str:
        names = ", ".join(b.describe() for b in self.backends) if self.backends is not None else "plugin defaults"
        return f"{type(self).__name__}([{names}])"

    # ------------------------------------------------------------------ entry point
    def tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: list[Sample],
        device: torch.device,
        cache_dir: Path,
        signature: ForwardSignature | None = None,
        executor: Executor | None = None,
        guard: ModuleGuard | None = None,
    ) -> Backend:
        """Choose, build and return the backend for one graph (ACTIVE).

        executor: where candidates run; None takes ``config.executor`` for this graph only.
        guard: watches ``module`` around every candidate step; ``tune()`` passes one per
            module so its copy of the weights serves all the module's graphs. None: one
            for this graph only.
        """
        with _graph_executor(executor) as chosen:
            self.results = []
            self.lower = []
            self.eager_serves = []
            self._candidate_count = self._candidate_index = 0
            log = get_logger(module=name, graph=graph_spec.name, strategy=type(self).__name__)
            own_guard = guard is None
            self.session = GraphSession(
                module=module,
                module_name=name,
                graph=graph_spec,
                samples=data,
                device=device,
                cache_dir=cache_dir,
                signature=signature or ForwardSignature(module.forward),
                tolerances=self.tolerances,
                profile_config=self.profile_config,
                timer=self._timer(),
                log=log,
                guard=guard if guard is not None else ModuleGuard(module, name, log=log),
            )
            self.executor = chosen
            start = time.perf_counter()
            try:
                self._pre_tune(self.session)
                backend = self._tune(self.session)
                self._post_tune(self.session)
            finally:
                chosen.end_graph(self.session)
                if own_guard:
                    self.session.guard.release()  # the strategy outlives the graph; the copy of the weights need not
            self.session.log.info(
                "strategy finished", selected=backend.describe(), duration_s=round(time.perf_counter() - start, 3)
            )
            return backend

    def _pre_tune(self, session: GraphSession) -> None:
        """Runs before :meth:`_tune`; extend to prepare shared state."""

    def _post_tune(self, session: GraphSession) -> None:
        """Runs after :meth:`_tune`; extend to clean up or report."""

    @abc.abstractmethod
    def _tune(self, session: GraphSession) -> Backend:
        """Return the tuned, ACTIVE backend for ``session``'s graph; copy blueprints, never build them.

        ``session`` holds the module, the graph, its samples, the device and the log;
        :meth:`evaluate_all` then :meth:`route_by_batch` is the usual body.
        """

    def _timer(self) -> Timer:
        return self.timer or config.timer or WallClock()

    # ------------------------------------------------------------------ helpers for subclasses
    def allows_lossy(self) -> bool:
        """Whether lossy default candidates are tried: ``config.allow_lossy``, or tolerances given here.

        Tolerances given to the strategy are the user's own bound on the error, so
        candidates that change the numbers on purpose are judged against them.
        """
        return config.allow_lossy or bool(self.tolerances.by_dtype)

    def offered(self, device: torch.device) -> list[tuple[Backend, Availability]]:
        """Every candidate, with whether it is tried on ``device`` and, if not, why.

        Backends named in the strategy are always offered, lossy or not: naming one is
        opting in. Of the plugins' defaults, lossy ones are held back unless
        :meth:`allows_lossy`.
        """
        if self.backends is not None:
            return [(blueprint, blueprint.availability(device)) for blueprint in self.backends]
        return _plugin_defaults(device, self.allows_lossy())

    def candidates(self, device: torch.device) -> list[Backend]:
        """The candidates available on ``device``; the others are logged and recorded as skipped."""
        assert self.session is not None
        available = []
        for blueprint, availability in self.offered(device):
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

        With ``parallel_candidates`` and an executor that runs several at once, all are
        submitted before the first result is awaited; otherwise each is evaluated when
        the previous one has been consumed, exactly as a loop over :meth:`evaluate`.
        """
        assert self.session is not None
        if not self.parallel_candidates or self._executor().max_parallel(self.session) <= 1:
            for blueprint in blueprints:
                yield self.evaluate(blueprint)
            return
        pending = [self.submit(blueprint) for blueprint in blueprints]
        for item in pending:
            yield item.result()

    def submit(self, blueprint: Backend, raise_errors: bool = False) -> PendingCandidate:
        """Add a summary row for ``blueprint`` and hand it to the executor; returns at once where it can."""
        session = self.session
        assert session is not None
        result = CandidateResult(blueprint.describe(), "failed", key=blueprint.key(), blueprint=blueprint)
        self.results.append(result)
        self._candidate_index += 1
        total = max(self._candidate_count, self._candidate_index)
        log = session.log.bind(backend=result.backend)
        log.info("candidate", progress=f"{self._candidate_index}/{total}")
        task = CandidateTask(
            blueprint=blueprint,
            correctness_check=self.correctness_check,
            raise_errors=raise_errors,
            result=result,
            log=log,
        )
        return self._executor().submit(session, task)

    def _executor(self) -> Executor:
        if self.executor is None:
            self.executor = InProcessExecutor()
        return self.executor

    def serving_sizes(self, extra: int | None = None) -> list[int | None]:
        """The batch sizes the user's data came in (plus ``extra``): where candidates are compared.

        None for a graph without a batch axis. With ``profile.sweep`` off, only the largest.
        """
        assert self.session is not None
        if self.session.batch_range() is None:
            return [None]
        sizes = {sample.batch_size for sample in self.session.samples if sample.batch_size}
        sizes |= set(self.session.batch_range() or ())
        if extra is not None:
            sizes.add(extra)
        ordered: list[int | None] = list(sorted(sizes))
        return ordered if self.profile_config.sweep else ordered[-1:]

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
        return self._route(*planned)

    def plan_routes(
        self, results: list[CandidateResult], sizes: list[int | None], allowed: Allowed | None = None
    ) -> tuple[list[Segment], Ranking] | None:
        """Time and plan as :meth:`route_by_batch` does, releasing the losers; None when none is live.

        For strategies that look at the plan before routing (FirstWins moves on when
        its candidate wins no batch range).
        """
        assert self.session is not None
        session = self.session
        live = [r for r in results if r.status == "passed" and self._make_live(r)]
        if not live:
            return None
        gate = self.performance_gate if self.performance_validation else None
        try:
            with session.guard.step("profile"):
                ranking = rank(session, live, sizes, gate, session.timer, _never_wins)
        except ModuleChangedError as changed:
            for result in live:
                result.status, result.stage, result.reason = "failed", changed.step, str(changed)
                self.discard(result)
            return None
        contenders = [r for r in live if not _never_wins(r)]
        self._uncapped = winners(ranking, contenders, live, allowed)
        segments = plan(ranking, self._uncapped, live, self.max_backends, session.batch_range(), allowed)
        eager_row = next((r for r in live if _never_wins(r)), None)
        if eager_row is not None:  # eager was a candidate too: its row serves eager's ranges
            segments = merge([Segment(s.low, s.high, s.winner or eager_row) for s in segments])
        serving = {id(s.winner) for s in segments if s.winner is not None}
        for result in live:
            if id(result) in serving:
                continue
            result.status, result.reason = self.lost(result, ranking)
            if result.status == "rejected" and not result.stage:
                result.stage = "performance"
            session.log.info("not serving", backend=result.backend, status=result.status, reason=result.reason)
            self.discard(result)
        return segments, ranking

    def lost(self, result: CandidateResult, ranking: Ranking) -> tuple[Status, str]:
        """``(status, reason)`` of a live candidate that serves no batch range; strategies may say more."""
        if _never_wins(result):
            return "passed", "eager itself: where it would serve, the original module serves"
        return lost_reason(ranking, result, self.performance_gate, self._uncapped, self.max_backends)

    def _make_live(self, result: CandidateResult) -> bool:
        """Restore a candidate that was built elsewhere, so that it is timed here with the others."""
        assert self.session is not None
        if result.instance is not None:
            return True
        try:
            result.instance = self._executor().restore(self.session, result, validate=self.correctness_check)
        except Exception as error:
            result.status = "failed"
            result.stage = error.step if isinstance(error, ModuleChangedError) else "restore"
            result.reason = failure_reason(error)
            self.session.log.warning("restore failed", backend=result.backend, reason=result.reason)
            return False
        return True

    def _route(self, segments: list[Segment], ranking: Ranking) -> Backend:
        assert self.session is not None
        top = segments[-1]
        for segment in segments:
            if segment.winner is not None:
                segment.winner.serves.append((segment.low, segment.high))
        below = segments[:-1]
        if top.winner is None:
            reason = _eager_reason(ranking, segments, self.results, self.performance_gate)
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

    def discard(self, result: CandidateResult) -> None:
        """Release a candidate that will not serve; its row fails if releasing it changed the user's module."""
        assert self.session is not None
        discard(result, guard=self.session.guard)

    def give_up(self, reason: str) -> Backend:
        """Leave the graph eager after its tuning raised: release what was built, keep the rows."""
        self.lower, self.eager_serves = [], []
        for result in self.results:
            if result.instance is not None:
                self.discard(result)
        return self.eager_fallback(reason)

    def eager_fallback(self, reason: str) -> Backend:
        """Build the eager backend for this graph: the answer when no candidate qualifies."""
        assert self.session is not None
        with self.session.guard.step("build"):  # a plugin's lifecycle hook runs here too
            backend = TorchEagerBackend().build(self.session.context(TorchEagerBackend()))
        self.results.append(
            CandidateResult("TorchEagerBackend()", "fallback", reason=reason, key=backend.key(), instance=backend)
        )
        self.session.log.info("falling back to eager", reason=reason)
        return backend

    def select(self, result: CandidateResult, largest: int | None = None) -> Backend:
        """Make ``result`` serve; a winner built elsewhere is restored here first.

        ``largest``: the largest batch it serves, where its row's numbers are taken.
        A winner that cannot be restored (or fails validation here) leaves the graph
        eager, with the reason in its row.
        """
        assert self.session is not None
        if not self._make_live(result):
            return self.eager_fallback(f"{result.backend} won but could not be restored here")
        assert result.instance is not None
        result.status = "selected"
        at = next((m for m in result.sweep if m.batch_size == largest), None) if largest else None
        if at is not None or result.sweep:
            result.measurement = at or result.sweep[-1]
            speedup = result.speedups.get(result.measurement.batch_size)
            result.speedup = speedup.median if speedup is not None and self.performance_validation else None
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


def _eager_reason(ranking: Ranking, segments: list[Segment], results: list[CandidateResult], gate: float) -> str:
    """Why eager serves the largest batches: the closest candidate's verdict there, or that none passed."""
    losers = [r for r in results if r.status in ("rejected", "passed") and r.stage == "performance"]
    if losers:
        return losers[0].reason
    winners = [s.winner for s in segments if s.winner is not None]
    if winners:
        return f"no candidate beat eager by the {gate:.2f}x gate at {segments[-1].describe()}"
    return "no candidate beat eager by the gate"


def _never_wins(result: CandidateResult) -> bool:
    """Plain eager as a candidate is timed for the table, but serving it is serving eager."""
    return is_plain_eager(result.instance or result.blueprint)


def _plugin_defaults(device: torch.device, allow_lossy: bool) -> list[tuple[Backend, Availability]]:
    return default_backends(device, allow_lossy)
