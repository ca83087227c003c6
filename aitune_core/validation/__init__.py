"""Correctness checks of candidates against eager."""

from aitune_core.backends.tolerances import Tolerance, Tolerances
from aitune_core.validation.compare import compare_outputs, find_non_finite
from aitune_core.validation.reference import EagerReference, ValidationResult

__all__ = ["EagerReference", "Tolerance", "Tolerances", "ValidationResult", "compare_outputs", "find_non_finite"]
