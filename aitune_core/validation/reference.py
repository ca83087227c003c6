"""Eager reference outputs, computed once per graph and shared by every candidate."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import torch

from aitune_core.validation.compare import Comparison, compare_outputs, find_non_finite
from aitune_core.validation.inputs import CallInputs
from aitune_core.validation.tolerances import Tolerances


@attrs.define(eq=False)
class ReferencePoint:
    call: CallInputs
    outputs: Any


@attrs.define
class ValidationResult:
    passed: bool
    reason: str = ""
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    checked: list[str] = attrs.field(factory=list)
    duration_s: float = 0.0


class EagerReference:
    """What eager returns for each validation call.

    A generated extreme that eager itself rejects (say, a sequence longer than the
    model's position table) is not a valid test point; it is dropped and noted.
    """

    def __init__(self, module: Callable[..., Any], calls: list[CallInputs]) -> None:
        self.points: list[ReferencePoint] = []
        self.skipped: list[str] = []
        with torch.no_grad():
            for call in calls:
                try:
                    outputs = module(*call.args, **call.kwargs)
                except Exception as error:
                    if call.label.startswith("sample"):
                        raise
                    self.skipped.append(f"{call.label}: eager raised {type(error).__name__}: {error}")
                    continue
                self.points.append(ReferencePoint(call, _detach(outputs)))

    def validate(self, candidate: Callable[..., Any], tolerances: Tolerances) -> ValidationResult:
        start = time.perf_counter()
        result = ValidationResult(passed=True)
        with torch.no_grad():
            for point in self.points:
                label = point.call.label
                outputs = candidate(*point.call.args, **point.call.kwargs)
                where = find_non_finite(outputs)
                if where is not None and find_non_finite(point.outputs) is None:
                    return _fail(result, f"{label}: `{where}` has NaN or infinite values", start)
                comparison: Comparison = compare_outputs(outputs, point.outputs, tolerances)
                result.max_abs_error = max(result.max_abs_error, comparison.max_abs_error)
                result.max_rel_error = max(result.max_rel_error, comparison.max_rel_error)
                if comparison.problem is not None:
                    return _fail(result, f"{label}: {comparison.problem}", start)
                result.checked.append(label)
        result.duration_s = time.perf_counter() - start
        return result


def _fail(result: ValidationResult, reason: str, start: float) -> ValidationResult:
    result.passed = False
    result.reason = reason
    result.duration_s = time.perf_counter() - start
    return result


def _detach(value: Any) -> Any:
    from aitune_core.metadata.locator import Locator, map_leaves

    return map_leaves(value, Locator(None), lambda _l, leaf: leaf.detach() if isinstance(leaf, torch.Tensor) else leaf)
