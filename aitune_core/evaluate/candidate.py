"""Trying one candidate on one graph: build, validate, and a record of how it went.

Timing happens afterwards, with every candidate that passed and eager side by side
(:mod:`aitune_core.strategies.ranking`), so that all are measured under the same
conditions wherever they were built.

Every strategy runs candidates the same way; they differ only in which they try and
how they choose. Keeping the steps here means every strategy reports failures with
the same reasons and timings, which is what the summary table shows. Executors
(:mod:`aitune_core.executors`) call :func:`run_candidate` wherever the candidate runs,
in this process, a child process or a cluster worker, so the steps are the same there.

Each step runs inside the session's :class:`~aitune_core.guard.ModuleGuard`: a step
that changes the user's module fails the candidate at that step, and the module is
put back. Eager's reference outputs are computed before the validation step, so that
only the candidate's own work is checked.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Literal

import attrs
import torch

from aitune_core.backends.artifacts import seal_passed
from aitune_core.backends.base import Backend, BuildContext
from aitune_core.backends.tolerances import Tolerances
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.guard import ModuleChangedError, ModuleGuard, ModuleRestoreError
from aitune_core.profiling.measurement import Measurement, ProfileConfig
from aitune_core.profiling.stats import Speedup
from aitune_core.profiling.timer import Timer, WallClock
from aitune_core.third_party_output import ThirdPartyOutput, collected_third_party_output
from aitune_core.validation.inputs import CallInputs, batch_call, validation_calls
from aitune_core.validation.points import validation_points
from aitune_core.validation.reference import EagerReference

Status = Literal["selected", "passed", "rejected", "failed", "skipped", "fallback"]


@attrs.define(eq=False)
class CandidateResult:
    """How one candidate fared on one graph; one row of the summary table."""

    backend: str
    status: Status
    stage: str = ""
    reason: str = ""
    key: str = ""
    build_s: float = 0.0
    validate_s: float = 0.0
    profile_s: float = 0.0
    measurement: Measurement | None = None
    sweep: list[Measurement] = attrs.field(factory=list)
    speedup: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    instance: Backend | None = attrs.field(default=None, repr=False)
    worker: str = ""
    """Where it ran (``pid@host``) when an executor ran it outside this process; empty in-process."""
    log_tail: str = attrs.field(default="", repr=False)
    """The end of the worker's log when the candidate failed out of process."""
    blueprint: Backend | None = attrs.field(default=None, repr=False)
    backend_data: dict[str, Any] | None = attrs.field(default=None, repr=False)
    """``to_dict()`` of the candidate as built out of process: what restores the winner here."""
    speedups: dict[int, Speedup] = attrs.field(factory=dict)
    """Its speedup over eager (with a confidence interval) at each batch size it was compared at."""
    serves: list[tuple[int | None, int | None]] = attrs.field(factory=list)
    """The batch ranges it serves once selected, ``(first, last)``; ``(None, None)``: every call."""

    def serves_batch(self, size: int) -> bool:
        return any(low is None or high is None or low <= size <= high for low, high in self.serves)

    def describe_serves(self) -> str:
        return ", ".join(describe_range(low, high) for low, high in self.serves)


def describe_range(low: int | None, high: int | None) -> str:
    """``"batch 1-4"``, ``"batch 8"``, or ``"every call"`` for a graph without a batch axis."""
    if low is None or high is None:
        return "every call"
    return f"batch {low}" if low == high else f"batch {low}-{high}"


class CandidateRejectedError(RuntimeError):
    """A candidate built but gave wrong outputs; ``result`` holds the reason and the error measured."""

    def __init__(self, result: CandidateResult) -> None:
        super().__init__(result.reason)
        self.result = result


class CandidateFailedError(RuntimeError):
    """A candidate run out of process failed; its original exception stayed there, ``result`` says why."""

    def __init__(self, result: CandidateResult) -> None:
        where = f" on {result.worker}" if result.worker else ""
        super().__init__(f"{result.backend} failed at {result.stage or 'start'}{where}: {result.reason}")
        self.result = result


@attrs.define(eq=False)
class GraphSession:
    """The graph being tuned and what is shared by all of its candidates.

    The eager reference outputs are computed once, lazily, and then reused for every
    candidate. ``guard`` watches the module around every candidate
    step; ``tune()`` shares one between a module's graphs, so that its copy of the
    weights is made once per module.
    """

    module: torch.nn.Module
    module_name: str
    graph: GraphSpec
    samples: list[Sample]
    device: torch.device
    cache_dir: Path
    signature: ForwardSignature
    tolerances: Tolerances
    profile_config: ProfileConfig
    log: Any
    timer: Timer = attrs.field(factory=WallClock)
    eager_sweep: list[Measurement] = attrs.field(factory=list)
    """Eager's measurements from the comparisons, one per batch size compared."""
    _reference: EagerReference | None = None
    guard: ModuleGuard = attrs.field(
        default=attrs.Factory(lambda self: ModuleGuard(self.module, self.module_name, log=self.log), takes_self=True)
    )

    @property
    def reference(self) -> EagerReference:
        if self._reference is None:
            points = validation_points(self.graph, self.samples)
            self._reference = EagerReference(self.module, points, self.signature, self.device)
            for note in self._reference.skipped:
                self.log.info("validation point skipped", note=note)
            for note in self._reference.notes:
                self.log.warning("weak validation reference", note=note)
        return self._reference

    # ------------------------------------------------------------------ batches
    def batch_range(self) -> tuple[int, int] | None:
        return self.graph.batch_range

    def call_at(self, batch_size: int | None) -> tuple[CallInputs, int]:
        """Inputs for one timed call, and the number of samples it carries."""
        sample = self.samples[0]
        if batch_size is None or self.batch_range() is None:
            call = validation_calls(self.graph, [sample], self.signature, self.device)[0]
            return call, sample.batch_size or 1
        return batch_call(self.graph, sample, self.signature, self.device, batch_size), batch_size

    def context(self, backend: Backend) -> BuildContext:
        """A build context whose ``cache_dir`` is a new folder that only this build writes to.

        See :mod:`aitune_core.backends.build_folders`: the folder is named after the
        module's weights, the graph and the backend key, with a unique last part.
        """
        from aitune_core.backends import build_folders

        weights = build_folders.weights_fingerprint(self.module, scope=self.guard)
        identity = build_folders.build_identity(weights, self.graph, backend.key())
        return BuildContext(
            module=self.module,
            module_name=self.module_name,
            graph_spec=self.graph,
            samples=self.samples,
            device=self.device,
            cache_dir=build_folders.claim_build_folder(build_folders.builds_root(self.cache_dir), identity),
            signature=self.signature,
        )


def build_candidate(session: GraphSession, blueprint: Backend, result: CandidateResult) -> Backend:
    """Build a fresh copy of ``blueprint``; the blueprint itself is never built."""
    backend = blueprint.blueprint()
    context = session.context(backend)
    with session.guard.step("build"):  # a check may run the module (on fake tensors)
        declined = backend.declines(context)
    if declined is not None:
        raise CandidateDeclinedError(declined)
    context.cache_dir.mkdir(parents=True, exist_ok=True)
    session.log.info("build started", backend=result.backend)
    start = time.perf_counter()
    try:
        with collected_third_party_output() as chatter, session.guard.step("build"):
            backend.build(context)
    except ModuleChangedError:
        release(backend, session.guard)  # built, but it will not serve
        raise
    finally:
        result.build_s = time.perf_counter() - start
        _keep_chatter(session, result, chatter, context.cache_dir / BUILD_LOG)
    session.log.info(
        "build finished",
        backend=result.backend,
        duration_s=round(result.build_s, 3),
        **{k: v for k, v in backend.build_info.items() if isinstance(v, (int, float, str, bool))},
    )
    return backend


BUILD_LOG = "build.log"
"""Where a candidate's build folder keeps what other libraries said while it built."""


def context_of(backend: Backend) -> BuildContext:
    assert backend.context is not None, "a built backend keeps its build context"
    return backend.context


def _keep_chatter(session: GraphSession, result: CandidateResult, chatter: ThirdPartyOutput, path: Path) -> None:
    """Other libraries' output goes to the build log; the console gets one line that says where."""
    written = chatter.write(path)
    if written is not None:
        session.log.info("third-party output kept", backend=result.backend, said=chatter.summary(), log=str(written))


def run_candidate(
    session: GraphSession,
    blueprint: Backend,
    result: CandidateResult,
    correctness_check: bool = True,
    raise_errors: bool = False,
    log: Any = None,
) -> CandidateResult:
    """Build a copy of ``blueprint`` and validate it against eager.

    Timing is the strategy's business afterwards, with every candidate and eager
    interleaved (:mod:`aitune_core.strategies.ranking`).

    Fills ``result`` in place. Its ``instance`` is the ACTIVE backend when every step
    passed, else None and the backend is released. With ``raise_errors``, a build or
    validation exception propagates unchanged (OneBackendStrategy wants the original).
    """
    log = log if log is not None else session.log.bind(backend=result.backend)
    backend: Backend | None = None
    stage = "build"
    try:
        backend = build_candidate(session, blueprint, result)
        result.instance = backend
        stage = "validation"
        if correctness_check:
            tolerances = backend.default_tolerances().merged(session.tolerances)
            reference = session.reference  # eager's calls happen here, outside the candidate's step
            with collected_third_party_output() as chatter, session.guard.step(stage):
                try:
                    validation = reference.validate(backend, tolerances)
                finally:  # a JIT backend compiles again at new shapes here, and torch says so
                    _keep_chatter(session, result, chatter, context_of(backend).cache_dir / BUILD_LOG)
            result.validate_s = validation.duration_s
            result.max_abs_error = validation.max_abs_error
            result.max_rel_error = validation.max_rel_error
            if not validation.passed:
                raise _ValidationFailed(validation.reason)
            log.info(
                "validated",
                checked="; ".join(validation.checked),
                calls=validation.calls,
                duration_s=round(validation.duration_s, 3),
                max_abs_error=float(f"{validation.max_abs_error:.3g}"),
                **({"note": "; ".join(validation.notes)} if validation.notes else {}),
            )
        stage = "serialize"
        seal_passed(backend)  # what save may write: checked and hashed as it passed
        result.status = "passed"
    except CandidateDeclinedError as declined:
        result.status, result.stage, result.reason = "skipped", DECLINED_STAGE, str(declined)
        log.info("declined", reason=result.reason)
        if raise_errors:
            raise
    except _ValidationFailed as failure:
        result.status, result.stage, result.reason = "rejected", stage, str(failure)
        log.warning("validation failed", reason=result.reason)
        if raise_errors:
            release(backend, session.guard)
            raise CandidateRejectedError(result) from None
    except ModuleRestoreError:
        release(backend, session.guard)
        raise
    except Exception as error:
        result.status, result.stage = "failed", stage
        result.reason = failure_reason(error)
        log.warning(f"{stage} failed", reason=result.reason)
        if raise_errors:
            release(backend, session.guard)
            raise
    if result.status != "passed":
        discard(result, backend, session.guard)
    return result


def failure_reason(error: BaseException) -> str:
    """The summary row's reason: the exception with its type, or a guard's finding as it is."""
    if isinstance(error, ModuleChangedError):
        return str(error)
    return f"{type(error).__name__}: {error}".strip()


class _ValidationFailed(Exception):
    pass


class CandidateDeclinedError(RuntimeError):
    """The backend said, before building, that it will not take this graph (``Backend.declines``)."""


DECLINED_STAGE = "declined"
"""The stage of a candidate that declined the graph before building."""


def release(backend: Backend | None, guard: ModuleGuard | None = None) -> ModuleChangedError | None:
    """Free a candidate that lost, so only winners hold memory; a failed release is not fatal.

    With ``guard``, the deactivation is a guarded step: a change it made to the user's
    module is undone and returned (a :class:`ModuleRestoreError` still propagates).
    """
    from aitune_core.backends.state import BackendState

    if backend is None or backend.state is not BackendState.ACTIVE:
        return None
    if guard is None:
        with contextlib.suppress(Exception):
            backend.deactivate()
        return None
    try:
        with guard.step("deactivate"), contextlib.suppress(Exception):
            backend.deactivate()
    except ModuleChangedError as changed:
        return changed
    return None


def discard(result: CandidateResult, backend: Backend | None = None, guard: ModuleGuard | None = None) -> None:
    """Release a candidate that will not serve and forget it; a row that changed the module on the way out fails.

    ``backend``: the instance to release when it is not (or no longer) ``result.instance``.
    """
    changed = release(backend if backend is not None else result.instance, guard)
    result.instance = None
    if changed is not None:
        if result.status != "failed":
            result.status, result.stage, result.reason = "failed", changed.step, str(changed)
        else:
            result.reason = f"{result.reason}; then {changed}"
