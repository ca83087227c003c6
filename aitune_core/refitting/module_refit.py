"""A tuned module's routes refitted for its weights now, and put in place only if those weights held still.

An attempt starts from a snapshot of the module (:meth:`Watch.snapshot
<aitune_core.module.staleness.Watch.snapshot>`: every tensor's version counter and
storage, every submodule's mode) and ends by comparing it again. Unchanged, the new
routes are installed with that snapshot as the staleness watch's baseline, so a write
made after it is still seen by the next call. Changed, the attempt is discarded and a
new one starts with the weights of that moment: what validation passed is only ever
what the backends serve, and no call is answered with older weights.

Every step of a backend runs inside a :class:`~aitune_core.refitting.guard.RefitGuard`:
what a backend changes in the user's module is put back, and fails its refit, as in
tuning; what the user's own code writes meanwhile is left alone and starts the attempt
again. Two ways to run it:

* now (``aitune_core.refit``): calls go to the original module meanwhile (the watch
  holds :data:`~aitune_core.module.new_weights.REFITTING`), and a refitted or rebuilt
  backend is kept in the artifact store as a tuned one is;
* in the background (``config.on_weight_change = "refit"``): calls go to the original
  module anyway (the watch found the new weights), and the store is left alone, as a
  build may have read weights half written.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aitune_core.backends.base import RefitError
from aitune_core.log import get_logger
from aitune_core.module.new_weights import REFITTING
from aitune_core.module.staleness import Baseline, Watch
from aitune_core.module.wrapper import Module, ModuleState
from aitune_core.refitting.guard import RefitGuard
from aitune_core.refitting.report import RefitReport
from aitune_core.refitting.route_refit import Attempt
from aitune_core.store.store import ArtifactStore

ATTEMPTS_NOW = 3
"""Attempts of ``aitune_core.refit`` before it gives up on weights that keep changing under it."""
ATTEMPTS_IN_BACKGROUND = 8
"""Attempts in a row of a background refit before it waits for the user's next write (a hook firing).

Weights that change during every attempt with no hook firing are the module's own doing
(a forward that updates a buffer, run by validation's eager calls): trying again would
never end."""


class WeightsKeptChangingError(RefitError):
    """The weights changed during every attempt of a refit; ``touches``: the watch's count when it gave up."""

    def __init__(self, message: str, touches: int) -> None:
        super().__init__(message)
        self.touches = touches


def watch_of(wrapper: Module) -> Watch:
    watch: Watch = wrapper.__dict__["_watch"]  # the wrapper's own staleness watch: refits set its baseline
    return watch


def why_not(wrapper: Module) -> str | None:
    """Why ``wrapper``'s routes cannot be refitted now, if anything stops it."""
    if wrapper.state is not ModuleState.TUNED:
        return f"it is {wrapper.state.value}, not serving tuned routes"
    if wrapper.__dict__.get("_claims"):
        return "a tune() runs on it; its routes are replaced when that ends"
    released = wrapper.__dict__.get("_weights_released")
    if released:
        return f"its weights were released ({released}); load them back, or load the checkpoint again"
    change = watch_of(wrapper).mode_change()
    if change is not None:
        return (
            f"{change.detail}; refits validate against eager in the mode the routes were tuned in: put the module "
            "back in that mode (.eval()) first"
        )
    return None


def refit_module(wrapper: Module, background: bool, stopping: Callable[[], bool] = lambda: False) -> RefitReport | None:
    """Refit every route of ``wrapper`` for its weights now, validated, and install them.

    background: run as the background refit does (see the module docstring). Returns the
    report; None when a background refit found nothing to do or had to stop (the module
    left its tuned mode, ``stopping()`` said so). ``aitune_core.refit`` raises RefitError
    instead, naming why.
    """
    log = get_logger(module=wrapper.name)
    watch = watch_of(wrapper)
    report = RefitReport(background=background)
    started = time.perf_counter()
    if not background:
        watch.hold(REFITTING)
    try:
        while True:
            problem = why_not(wrapper)
            if problem is not None:
                if background:
                    log.info("refit stopped", reason=problem)
                    return None
                raise RefitError(f"aitune module `{wrapper.name}` cannot be refitted: {problem}")
            if background and watch.weight_change() is None:
                return None  # the routes fit the weights already (a refit installed them meanwhile)
            baseline = watch.snapshot()
            log.info("refit started", routes=len(wrapper.routes), background=background)
            attempt = _attempt(wrapper, watch, background, log)
            guard = attempt.guard
            if guard.changed_steps and isinstance(guard, RefitGuard) and not guard.user_wrote:
                baseline = watch.snapshot()  # the guard put a backend's writes back: the same values, new versions
            changed = baseline.weight_change() or baseline.mode_change()
            if changed is None and why_not(wrapper) is None:  # no tune() claimed it meanwhile
                _install(wrapper, attempt, baseline)
                break
            attempt.discard()
            if changed is None:
                continue  # the loop's first check says why it stops
            report.discarded += 1
            log.info("refit discarded", reason=changed.detail, discarded=report.discarded)
            if stopping():
                return None
            limit = ATTEMPTS_IN_BACKGROUND if background else ATTEMPTS_NOW
            if report.discarded >= limit:
                raise WeightsKeptChangingError(
                    f"aitune module `{wrapper.name}`: its weights changed during each of {limit} refits in a row "
                    f"({changed.detail}); the original module serves. Stop writing them while a refit runs (a forward "
                    "that updates its own buffers does too), then call aitune_core.refit(model)",
                    watch.touches,
                )
    except BaseException:
        if not background:
            watch.release()
        raise
    report.routes, report.unchanged = attempt.rows, attempt.unchanged
    report.duration_s = time.perf_counter() - started
    log.info(
        "refit finished",
        background=background,
        duration_s=round(report.duration_s, 3),
        discarded=report.discarded,
        **report.outcomes(),
    )
    return report


def _attempt(wrapper: Module, watch: Watch, background: bool, log: object) -> Attempt:
    guard = RefitGuard(watch, wrapper.module, wrapper.name, log=log)
    attempt = Attempt(wrapper, guard, None if background else ArtifactStore.from_config(), log)
    try:
        attempt.run()
    except BaseException:
        attempt.discard()
        raise
    finally:
        guard.release()
    return attempt


def _install(wrapper: Module, attempt: Attempt, baseline: Baseline) -> None:
    """Serve the attempt's routes; the backends they replace are released."""
    wrapper.drop_routes()
    wrapper.set_routes(attempt.routes, baseline)
    attempt.built.clear()
