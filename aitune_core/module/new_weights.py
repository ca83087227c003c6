"""What a call does once its module's weights changed under backends that hold their own copy.

The staleness watch (:mod:`aitune_core.module.staleness`) finds the change; the call goes
to the original module whatever happens next, so no call is answered with the old
weights. ``config.on_weight_change`` says what else:

* ``"refit"`` (the default): the module asks for its routes to be refitted in the
  background (:mod:`aitune_core.refitting`, reached through ``extensions.request_refit``);
  they serve again once the new weights passed validation;
* ``"eager"``: nothing more, until ``aitune_core.refit(model)`` or a new tune;
* ``"raise"``: the call raises :class:`StaleWeightsError`, which names the fix.
"""

from __future__ import annotations

from typing import Any

from aitune_core.config import config
from aitune_core.extensions import request_refit
from aitune_core.module.staleness import Change

REFIT_HINT = (
    "the original module serves while the routes are refitted for them in the background "
    "(aitune_core.config.on_weight_change = 'refit'); aitune_core.wait_for_refit(model) waits for it. "
    "Or re-run aitune_core.tune, or load a checkpoint, to tune for the new weights"
)

REFITTING = Change(
    Change.WEIGHTS,
    "its routes are being refitted for new weights",
    "they serve again once the new weights pass validation",
)
"""What a watch holds while ``aitune_core.refit`` works on its routes: calls go to the original module."""


class StaleWeightsError(RuntimeError):
    """A tuned module's weights changed, its backends hold the old ones, and ``config.on_weight_change == "raise"``."""


def respond(module: Any, change: Change) -> Change:
    """Act on ``change`` (new weights) as ``config.on_weight_change`` says; the change to report for the call."""
    if change is REFITTING:
        return change
    policy = config.on_weight_change
    if policy == "raise":
        raise StaleWeightsError(
            f"aitune module `{module.name}`: {change.detail}, and its tuned backends hold the old weights. "
            "Call aitune_core.refit(model) to take the new weights into them, or set "
            "aitune_core.config.on_weight_change = 'refit' to do it in the background while the original module "
            "serves ('eager': the original module serves until then)"
        )
    if policy == "refit":
        request_refit(module)
        return Change(change.kind, change.detail, REFIT_HINT)
    return change
