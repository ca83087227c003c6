"""Refit: tuned routes take a model's new weights, validated before they serve.

``api`` (``refit``, ``wait_for_refit``), ``module_refit`` (one module: snapshot, attempt,
install), ``route_refit`` (one pass over a module's routes), ``backend_refit`` (one
backend: refit, else rebuild, else eager), ``background`` (``config.on_weight_change =
"refit"``) and ``report`` (``RefitReport``). See docs/refit.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "refit": "aitune_core.refitting.api",
    "wait_for_refit": "aitune_core.refitting.api",
    "RefitReport": "aitune_core.refitting.report",
    "RouteRefit": "aitune_core.refitting.report",
}

__all__ = ["RefitReport", "RouteRefit", "refit", "wait_for_refit"]

__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"module 'aitune_core.refitting' has no attribute {name!r}"
)

if TYPE_CHECKING:
    from aitune_core.refitting.api import refit, wait_for_refit
    from aitune_core.refitting.report import RefitReport, RouteRefit
