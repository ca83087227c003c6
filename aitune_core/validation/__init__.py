"""Correctness checks of candidates against eager."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "Tolerance": "aitune_core.backends.tolerances",
    "Tolerances": "aitune_core.backends.tolerances",
    "compare_outputs": "aitune_core.validation.compare",
    "find_non_finite": "aitune_core.validation.compare",
    "EagerReference": "aitune_core.validation.reference",
    "ValidationResult": "aitune_core.validation.reference",
}

__all__ = ["EagerReference", "Tolerance", "Tolerances", "ValidationResult", "compare_outputs", "find_non_finite"]

__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"module 'aitune_core.validation' has no attribute {name!r}"
)

if TYPE_CHECKING:
    from aitune_core.backends.tolerances import Tolerance, Tolerances
    from aitune_core.validation.compare import compare_outputs, find_non_finite
    from aitune_core.validation.reference import EagerReference, ValidationResult
