"""Correctness checks of candidates against eager."""

from aitune_core.validation.compare import compare_outputs, find_non_finite
from aitune_core.validation.reference import EagerReference, ValidationResult
from aitune_core.validation.tolerances import Tolerance, Tolerances

__all__ = ["EagerReference", "Tolerance", "Tolerances", "ValidationResult", "compare_outputs", "find_non_finite"]
