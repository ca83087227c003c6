"""Reports and console output of a tuning run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "GraphReport": "aitune_core.reporting.summary",
    "TuneReport": "aitune_core.reporting.summary",
}

__all__ = ["GraphReport", "TuneReport"]

__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"module 'aitune_core.reporting' has no attribute {name!r}"
)

if TYPE_CHECKING:
    from aitune_core.reporting.summary import GraphReport, TuneReport
