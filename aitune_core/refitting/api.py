"""``aitune_core.refit(model)`` and ``aitune_core.wait_for_refit(model)``: tuned routes for the weights a model has now.

Weights change after tuning: fine-tuning and serving in turns, policy updates, adapter
swaps. ``refit`` takes the weights every tuned module of ``model`` holds now into the
backends of its routes, validates them as tuning validated them, and installs them; it
returns a :class:`~aitune_core.refitting.report.RefitReport`, whose printed form is a table
as after tuning. ``wait_for_refit`` waits for the background refits of
``config.on_weight_change = "refit"`` (the default) instead of making one.

What changes a module's graphs (new shapes, a new LoRA rank, other target modules) is
not a refit: tune again (docs/refit.md).
"""

from __future__ import annotations

import logging

from torch import nn

from aitune_core.backends.base import RefitError
from aitune_core.module.wrapper import Module, ModuleState
from aitune_core.refitting import background
from aitune_core.refitting.module_refit import refit_module
from aitune_core.refitting.report import RefitReport
from aitune_core.reporting.console import emit_block


def refit(model: nn.Module) -> RefitReport:
    """Refit the routes of every tuned aitune module in ``model`` (or ``model`` itself) for its weights now.

    Per route and backend: the backend takes the new weights itself where it can
    (``Backend.can_refit``), else (or when that raises or fails validation) the same
    candidate is built again; each is validated against eager with the new weights on
    the stored samples and the min, opt and max points before it serves. Where both
    fail, the original module serves those batches, and the report says why.

    Calls made meanwhile, from any thread, go to the original module. A background refit
    of the same module stops first. Raises RefitError when nothing in ``model`` is tuned,
    or when a module cannot be refitted now (in training mode, tuned again meanwhile),
    naming the fix; the module is then left as it was.
    """
    modules = tuned_modules(model)
    if not modules:
        raise RefitError("nothing to refit: no aitune module in this model is tuned; call aitune_core.tune first")
    report = RefitReport()
    for wrapper in modules:
        with background.paused(wrapper):
            done = refit_module(wrapper, background=False)
        assert done is not None, "a refit made now reports or raises"
        report.extend(done)
    emit_block("Refit summary", report.summary(), level=logging.WARNING)
    return report


def wait_for_refit(model: nn.Module, timeout: float | None = None) -> RefitReport | None:
    """Wait until no background refit of a tuned module in ``model`` runs; the last ones' report, or None.

    A refit that is due (weights changed that no call has looked at yet) is started first,
    so after a training loop, ``model.eval()`` then ``wait_for_refit(model)`` returns
    once the routes serve the new weights (or the report says why a range does not).
    Only with ``config.on_weight_change = "refit"``; otherwise it starts nothing.
    timeout: seconds to wait for each module; TimeoutError when they pass first.
    """
    reports = [report for wrapper in tuned_modules(model) if (report := background.wait(wrapper, timeout))]
    if not reports:
        return None
    merged = RefitReport(background=True)
    for report in reports:
        merged.extend(report)
    return merged


def tuned_modules(model: nn.Module) -> list[Module]:
    """Every tuned aitune module in ``model``, ``model`` included, in order."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"refit takes a torch.nn.Module (the model or an aitune module), got {type(model).__name__}")
    return [module for module in model.modules() if isinstance(module, Module) and module.state is ModuleState.TUNED]
