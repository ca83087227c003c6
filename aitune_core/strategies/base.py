"""TuneStrategy: how a graph's backend is chosen.

A strategy receives the graph, its recorded samples and the candidates (blueprints),
and returns one built, ACTIVE backend. Subclasses implement ``_tune`` and may extend
``_pre_tune``/``_post_tune``. The shared steps (build a copy, validate against eager,
profile, compare with the eager baseline) live in :meth:`TuneStrategy.evaluate`, so
custom strategies get the same checks and the same summary rows for free.

Where a candidate runs is the executor's business (:mod:`aitune_core.executors`):
:meth:`TuneStrategy.evaluate` tries one and waits for it, and
:meth:`TuneStrategy.evaluate_all` lets an executor run several at once when the
strategy looks at every result before choosing (``parallel_candidates``).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import torch

from aitune_core.backends.base import Availability, Backend
from aitune_core.backends.eager import TorchEagerBackend
from aitune_core.executors.base import CandidateTask, Executor, PendingCandidate
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.guard import ModuleChangedError, ModuleGuard
from aitune_core.log import get_logger
from aitune_core.profiling.measurement import Measurement, ProfileConfig
from aitune_core.strategies.candidates import (  # noqa: F401 - the errors are re-exported for strategies
    CandidateFailedError,
    CandidateRejectedError,
    CandidateResult,
    GraphSession,
    discard,
    failure_reason,
)
from aitune_core.strategies.defaults import skipped_as_lossy
from aitune_core.validation.tolerances import Tolerances

DEFAULT_PERFORMANCE_GATE = 1.01


class TuneStrategy(abc.ABC):
    """Base of all strategies.

    backends: the candidates, in priority order. None takes the defaults that the
        installed plugins offer for the device, skipping unavailable ones with a reason.
    performance_gate: how much faster than eager a backend must be to replace it
        (1.01 = 1% faster).
    tolerances: per-dtype tolerances for comparing with eager, on top of each backend's own.
    profile: how long and how to measure.
    """

    name: ClassVar[str] = "Tune Strategy"
    description: ClassVar[str] = ""
    parallel_candidates: ClassVar[bool] = False
    """Whether every candidate is tried whatever the others gave, so an executor may run them at once."""

    def __init__(
        self,
        backends: Sequence[Backend] | None = None,
        *,
        performance_gate: float = DEFAULT_PERFORMANCE_GATE,
        tolerances: Tolerances | None = None,
        profile: ProfileConfig | None = None,
    ) -> None:
        if backends is not None:
            backends = list(backends)
            for backend in backends:
                if not isinstance(backend, Backend):
                    raise TypeError(f"{type(self).__name__} takes Backend instances, got {type(backend).__name__}")
        if performance_gate <= 0:
            raise ValueError(f"performance_gate must be positive, got {performance_gate}")
        self.backends: list[Backend] | None = backends
        self.performance_gate = performance_gate
        self.tolerances = tolerances or Tolerances()
        self.profile_config = profile or ProfileConfig()
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
        if executor is not None:
            return self._tune_graph(module, name, graph_spec, data, device, cache_dir, signature, executor, guard)
        from aitune_core.config import config
        from aitune_core.executors.registry import resolve_executor

        chosen, owned = resolve_executor(config.executor)
        try:
            return self._tune_graph(module, name, graph_spec, data, device, cache_dir, signature, chosen, guard)
        finally:
            if owned:
                chosen.close()

    def _tune_graph(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: list[Sample],
        device: torch.device,
        cache_dir: Path,
        signature: ForwardSignature | None,
        executor: Executor,
        guard: ModuleGuard | None,
    ) -> Backend:
        self.results = []
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
            log=log,
            guard=guard if guard is not None else ModuleGuard(module, name, log=log),
        )
        self.executor = executor
        start = time.perf_counter()
        try:
            self._pre_tune(module, name, graph_spec, data, device, cache_dir)
            backend = self._tune(module, name, graph_spec, data, device, cache_dir)
            self._post_tune(module, name, graph_spec, data, device, cache_dir)
        finally:
            executor.end_graph(self.session)
            if own_guard:
                self.session.guard.release()  # the strategy outlives the graph; the copy of the weights need not
        self.session.log.info(
            "strategy finished", selected=backend.describe(), duration_s=round(time.perf_counter() - start, 3)
        )
        return backend

    def _pre_tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: list[Sample],
        device: torch.device,
        cache_dir: Path,
    ) -> None:
        """Runs before :meth:`_tune`; extend to prepare shared state."""

    def _post_tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: list[Sample],
        device: torch.device,
        cache_dir: Path,
    ) -> None:
        """Runs after :meth:`_tune`; extend to clean up or report."""

    @abc.abstractmethod
    def _tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: list[Sample],
        device: torch.device,
        cache_dir: Path,
    ) -> Backend:
        """Return the tuned, ACTIVE backend for this graph; copy blueprints, never build them."""

    # ------------------------------------------------------------------ helpers for subclasses
    def allows_lossy(self) -> bool:
        """Whether lossy default candidates are tried: ``config.allow_lossy``, or tolerances given here.

        Tolerances given to the strategy are the user's own bound on the error, so
        candidates that change the numbers on purpose are judged against them.
        """
        from aitune_core.config import config

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

    def evaluate(self, blueprint: Backend, profile_at: list[int | None], raise_errors: bool = False) -> CandidateResult:
        """Build a copy of ``blueprint``, validate it and profile it at ``profile_at``, and wait for it.

        The result's ``instance`` is the ACTIVE backend when every step passed in this
        process; an out-of-process executor leaves it None until :meth:`select` restores
        the winner here. With ``raise_errors``, a build or validation exception
        propagates (for OneBackendStrategy): unchanged in-process, as
        :class:`CandidateFailedError` or :class:`CandidateRejectedError` from elsewhere.
        """
        return self.submit(blueprint, profile_at, raise_errors).result()

    def evaluate_all(self, blueprints: Iterable[Backend], profile_at: list[int | None]) -> Iterator[CandidateResult]:
        """Evaluate every blueprint, yielding results in the order given.

        With ``parallel_candidates`` and an executor that runs several at once, all are
        submitted before the first result is awaited; otherwise each is evaluated when
        the previous one has been consumed, exactly as a loop over :meth:`evaluate`.
        """
        assert self.session is not None
        if not self.parallel_candidates or self._executor().max_parallel(self.session) <= 1:
            for blueprint in blueprints:
                yield self.evaluate(blueprint, profile_at)
            return
        pending = [self.submit(blueprint, profile_at) for blueprint in blueprints]
        for item in pending:
            yield item.result()

    def submit(self, blueprint: Backend, profile_at: list[int | None], raise_errors: bool = False) -> PendingCandidate:
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
            profile_at=list(profile_at),
            correctness_check=self.correctness_check,
            measure_eager=self.performance_validation,
            raise_errors=raise_errors,
            result=result,
            log=log,
        )
        return self._executor().submit(session, task)

    def _executor(self) -> Executor:
        if self.executor is None:
            from aitune_core.executors.inprocess import InProcessExecutor

            self.executor = InProcessExecutor()
        return self.executor

    def eager_baseline(self, batch_size: int | None) -> Measurement | None:
        """Eager's timing at ``batch_size``, or None when performance validation is off."""
        if not self.performance_validation:
            return None
        assert self.session is not None
        return self.session.eager_timing(batch_size)

    def passes_gate(self, result: CandidateResult, at: Measurement | None) -> bool:
        """Record the speedup over eager and check it against the performance gate."""
        if not self.performance_validation or result.measurement is None:
            return True
        if _is_plain_eager(result.instance or result.blueprint):
            return True  # eager is the baseline itself; there is nothing to gate
        assert self.session is not None
        batch = result.measurement.batch_size if self.session.batch_range() else None
        # Eager timed by the candidate's own worker, when it ran elsewhere: same machine, same load.
        baseline = result.eager_at(batch) or self.eager_baseline(batch)
        if baseline is None:
            return True
        result.speedup = result.measurement.throughput / baseline.throughput
        if result.speedup < self.performance_gate:
            result.status, result.stage = "rejected", "performance"
            result.reason = (
                f"{result.speedup:.2f}x eager at batch {result.measurement.batch_size}, "
                f"below the {self.performance_gate:.2f}x gate"
            )
            return False
        return True

    def discard(self, result: CandidateResult) -> None:
        """Release a candidate that will not serve; its row fails if releasing it changed the user's module."""
        assert self.session is not None
        discard(result, guard=self.session.guard)

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

    def _eager_up_to(self, result: CandidateResult) -> int | None:
        """Batch sizes where the winner is slower than eager, so that eager serves them.

        A backend chosen at the largest batch size can be slower than eager at small ones
        (int8 dynamic quantization at batch 1, say). Only with performance validation on,
        only over batch sizes actually profiled, and eager must win by the same gate a
        backend must pass to replace it.
        """
        session = self.session
        assert session is not None
        if (
            not self.performance_validation
            or _is_plain_eager(result.instance)
            or session.batch_range() is None
            or len(result.sweep) < 2
        ):
            return None

        def eager_at(batch_size: int) -> Measurement | None:
            return result.eager_at(batch_size) or session.eager_timing(batch_size)

        return _eager_faster_up_to(result.sweep, eager_at, self.performance_gate)

    def select(self, result: CandidateResult) -> Backend:
        """Make ``result`` the graph's backend; a winner built elsewhere is restored here first.

        A winner that cannot be restored (or fails validation here) leaves the graph
        eager, with the reason in its row.
        """
        assert self.session is not None
        if result.instance is None:
            try:
                result.instance = self._executor().restore(self.session, result, validate=self.correctness_check)
            except Exception as error:
                result.status = "failed"
                result.stage = error.step if isinstance(error, ModuleChangedError) else "restore"
                result.reason = failure_reason(error)
                self.session.log.warning("restore failed", backend=result.backend, reason=result.reason)
                return self.eager_fallback(f"{result.backend} won but could not be restored here")
        result.status = "selected"
        result.eager_up_to = self._eager_up_to(result)
        if result.eager_up_to is not None:
            self.session.log.info(
                "eager is faster for small batches", backend=result.backend, batch_up_to=result.eager_up_to
            )
        self.session.log.info(
            "selected",
            backend=result.backend,
            throughput=round(result.measurement.throughput, 2) if result.measurement else None,
            speedup=round(result.speedup, 3) if result.speedup else None,
        )
        return result.instance


def _eager_faster_up_to(
    sweep: list[Measurement], eager_at: Callable[[int], Measurement | None], gate: float
) -> int | None:
    """The largest profiled batch size up to which eager beat the backend at every size, by ``gate``."""
    limit = None
    for measurement in sorted(sweep, key=lambda m: m.batch_size):
        eager = eager_at(measurement.batch_size)
        if eager is None or eager.throughput < measurement.throughput * gate:
            break
        limit = measurement.batch_size
    return limit


def _is_plain_eager(backend: Backend | None) -> bool:
    return isinstance(backend, TorchEagerBackend) and not backend.config.autocast_enabled  # type: ignore[attr-defined]


def _plugin_defaults(device: torch.device, allow_lossy: bool) -> list[tuple[Backend, Availability]]:
    from aitune_core.strategies.defaults import default_backends

    return default_backends(device, allow_lossy)
