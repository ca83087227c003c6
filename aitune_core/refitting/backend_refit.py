"""One backend of one route, given the module's new weights: refitted, else rebuilt, else left to eager.

The order is the issue's: a backend that can take new weights in place
(:meth:`Backend.can_refit`) does (:meth:`Backend.refit`); one that runs the live weights
already (:func:`~aitune_core.module.router.follows_weights`: eager under autocast, a
backend that says ``reads_live_weights``) has nothing to take. Either is then validated
exactly as tuning validates a built candidate: against eager with the new weights, on the
stored samples and on the min, opt and max points (:mod:`aitune_core.validation.points`),
with the same tolerances. A backend that cannot refit, whose refit raises, or that fails
validation is built again from its own config, as tuning built it (build, validate, seal:
:func:`~aitune_core.evaluate.candidate.run_candidate`); if that fails too, the original
module serves its batches, and the reason is kept for the report and the log.

A refitted backend is sealed again once it passes, so ``save`` writes the artifacts it
holds now (a refit may rewrite them) and refuses any that change afterwards.
"""

from __future__ import annotations

import time

import torch

from aitune_core.backends.artifacts import seal_passed
from aitune_core.backends.base import Backend
from aitune_core.backends.tolerances import Tolerances
from aitune_core.evaluate.candidate import BUILD_LOG, failure_reason, release, run_candidate
from aitune_core.evaluate.result import CandidateResult
from aitune_core.evaluate.session import GraphSession
from aitune_core.guard import ModuleRestoreError
from aitune_core.module.router import follows_weights
from aitune_core.refitting.report import EAGER, REBUILT, REFITTED, RouteRefit
from aitune_core.third_party_output import ThirdPartyOutput, collected_third_party_output
from aitune_core.validation.reference import ValidationResult

CANNOT_REFIT = "it cannot take new weights without a rebuild (can_refit() is False)"


def refit_backend(
    session: GraphSession, backend: Backend, serves: str, tolerances: Tolerances | None
) -> tuple[Backend | None, RouteRefit]:
    """``backend`` (or its rebuild) serving the module's weights now, and its row; None: eager serves.

    tolerances: what the strategy added to the backend's own when tuning validated it.
    """
    start = time.perf_counter()
    log = session.log.bind(backend=backend.describe())
    row = RouteRefit(session.module_name, session.graph.name, serves, backend.describe(), EAGER, 0.0)
    reason = CANNOT_REFIT
    try:
        live = follows_weights(backend)
        if live or backend.can_refit():
            if not live:
                with torch.no_grad(), collected_third_party_output() as chatter, session.guard.step("refit"):
                    backend.refit(session.module)
                _keep(chatter, backend)
            result = validate(session, backend, tolerances)
            if result.passed:
                seal_passed(backend)  # what save may write: the artifacts as they passed now
                row.outcome, row.validation = REFITTED, passed(result)
                row.seconds = time.perf_counter() - start
                log.info("backend refitted", serves=serves, duration_s=round(row.seconds, 3), validation=row.validation)
                return backend, row
            what = "with the live weights" if live else "after its refit"
            reason = f"it failed validation {what}: {result.reason}"
    except ModuleRestoreError:
        raise
    except Exception as error:
        reason = f"its refit failed: {failure_reason(error)}"
    log.info("rebuilding backend", serves=serves, reason=reason)
    rebuilt = rebuild(session, backend, row, reason)
    row.seconds = time.perf_counter() - start
    if rebuilt is not None:
        log.info("backend rebuilt", serves=serves, duration_s=round(row.seconds, 3), reason=reason)
    else:
        log.warning("range left to the original module", serves=serves, reason=row.reason)
    return rebuilt, row


def rebuild(session: GraphSession, backend: Backend, row: RouteRefit, reason: str) -> Backend | None:
    """A fresh build of ``backend``'s config for the module as it is now, validated; None when that fails."""
    result = CandidateResult(backend.describe(), "failed", key=backend.key(), blueprint=backend)
    run_candidate(session, backend, result, correctness_check=True)
    if result.status == "passed" and result.instance is not None:
        row.outcome, row.reason = REBUILT, reason
        row.validation = f"passed: max abs error {result.max_abs_error or 0.0:.3g}"
        return result.instance
    row.outcome = EAGER
    row.reason = f"{reason}; then its rebuild {result.status} ({result.stage}): {result.reason}"
    row.validation = result.reason if result.stage == "validation" else ""
    return None


def validate(session: GraphSession, backend: Backend, tolerances: Tolerances | None) -> ValidationResult:
    """What tuning's validation step finds for ``backend`` now, eager computed with the module's weights now."""
    merged = backend.default_tolerances().merged(tolerances)
    reference = session.reference  # eager's calls happen here, outside the backend's step
    with collected_third_party_output() as chatter, session.guard.step("validation"):
        result = reference.validate(backend, merged)
    _keep(chatter, backend)
    return result


def passed(result: ValidationResult) -> str:
    return f"passed: {len(result.checked)} points, {result.calls} calls, max abs error {result.max_abs_error:.3g}"


def discard(backend: Backend | None, session: GraphSession) -> None:
    """Release a backend built by an attempt that will not be installed."""
    release(backend, session.guard)


def _keep(chatter: ThirdPartyOutput, backend: Backend) -> None:
    """Other libraries' output during the step goes to the backend's build log, as during tuning."""
    if backend.context is not None:
        chatter.write(backend.context.cache_dir / BUILD_LOG)
