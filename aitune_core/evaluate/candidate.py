"""Trying one candidate on one graph: build a copy, validate it against eager, release what lost.

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
from typing import Any

from aitune_core.backends import folder_lifetime
from aitune_core.backends.artifacts import seal_passed
from aitune_core.backends.base import Backend, BuildContext
from aitune_core.backends.build_folders import disk_full_reason
from aitune_core.backends.state import BackendState
from aitune_core.evaluate.result import CandidateRejectedError, CandidateResult
from aitune_core.evaluate.reuse import keep_build, refuse_stored_build, stored_build
from aitune_core.evaluate.session import GraphSession
from aitune_core.guard import ModuleChangedError, ModuleGuard, ModuleRestoreError
from aitune_core.third_party_output import ThirdPartyOutput, collected_third_party_output


def build_candidate(session: GraphSession, blueprint: Backend, result: CandidateResult, reuse: bool = True) -> Backend:
    """Build a fresh copy of ``blueprint``, or load its build from the store; the blueprint itself is never built."""
    backend = blueprint.blueprint()
    context = session.context(backend)
    with session.guard.step("build"):  # a check may run the module (on fake tensors)
        declined = backend.declines(context)
    if declined is not None:
        raise CandidateDeclinedError(declined)
    context.cache_dir.mkdir(parents=True, exist_ok=True)
    reused = stored_build(session, backend, context, result) if reuse else None
    if reused is not None:
        return reused
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
        result.note = backend.build_note
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
    reuse: bool = True,
) -> CandidateResult:
    """Build a copy of ``blueprint`` and validate it against eager.

    Timing is the strategy's business afterwards, with every candidate and eager
    interleaved (:mod:`aitune_core.strategies.ranking`).

    Fills ``result`` in place. Its ``instance`` is the ACTIVE backend when every step
    passed, else None and the backend is released. With ``raise_errors``, a build or
    validation exception propagates unchanged (OneBackendStrategy wants the original).

    A stored build that fails validation is refused and built here again: its key holds
    the weights' values but not what else the module computes with (PEFT's active
    adapter, an attribute its forward reads), so a build for another state can match.
    """
    log = log if log is not None else session.log.bind(backend=result.backend)
    backend: Backend | None = None
    stage = "build"
    try:
        backend = build_candidate(session, blueprint, result, reuse)
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
        if correctness_check:  # only what was validated is kept for the next tune
            keep_build(session, backend, result)
    except CandidateDeclinedError as declined:
        result.status, result.stage, result.reason = "skipped", DECLINED_STAGE, str(declined)
        log.info("declined", reason=result.reason)
        if raise_errors:
            raise
    except _ValidationFailed as failure:
        if result.reused and backend is not None:
            refuse_stored_build(session, backend, f"it fails validation here: {failure}")
            result.instance = None
            changed = release(backend, session.guard)
            if changed is not None:  # deactivating it changed the module: not built again
                result.status, result.stage, result.reason = "failed", changed.step, str(changed)
                return result
            result.reused = False
            return run_candidate(session, blueprint, result, correctness_check, raise_errors, log, reuse=False)
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
    full = disk_full_reason(error)  # a full disk: which folder, and how to make room
    return f"{type(error).__name__}: {full or error}".strip()


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
    dropped = backend if backend is not None else result.instance
    changed = release(dropped, guard)
    result.instance = None
    if dropped is not None and dropped.context is not None:
        folder_lifetime.let_go(dropped.context)  # its folder goes now, not at the next garbage collection
    if changed is not None:
        if result.status != "failed":
            result.status, result.stage, result.reason = "failed", changed.step, str(changed)
        else:
            result.reason = f"{result.reason}; then {changed}"
