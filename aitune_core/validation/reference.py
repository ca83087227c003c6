"""Eager reference outputs, computed once per graph and shared by every candidate.

Every call, eager's and each candidate's, runs on its own fresh copy of the point's
inputs (see :mod:`aitune_core.validation.isolation`), so a candidate that writes to its
inputs can neither corrupt the reference nor the next candidate's inputs; it is caught
and named instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import torch

from aitune_core.backends.tolerances import Tolerances
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.metadata.locator import Locator, map_leaves
from aitune_core.validation.compare import (
    Comparison,
    compare_outputs,
    compare_tensor,
    find_non_finite,
    has_checkable_value,
)
from aitune_core.validation.isolation import changed_inputs, fresh_copy
from aitune_core.validation.points import CALL_NAMES, ValidationPoint

NO_FINITE_REFERENCE = (
    "eager gave NaN or infinite outputs at every validation point, so values were compared only where eager "
    "is finite and NaN/infinity by exact position; record a call whose outputs are finite for a stronger check"
)
NOTHING_TO_CHECK = (
    "eager's outputs of {graph} are all NaN or infinite on the tuning data, so no candidate can be checked "
    "against them; tune with data that gives finite outputs (look for NaN or infinite values in the dataset, "
    "and in the module's weights and buffers)"
)


@attrs.define(eq=False)
class ReferenceCall:
    """One call of a point: its pristine inputs (CPU), eager's outputs, and the inputs eager wrote to."""

    name: str
    arguments: dict[str, Any]
    outputs: Any
    written: dict[Locator, torch.Tensor] = attrs.field(factory=dict)
    finite: bool = True
    checkable: bool = True
    """Whether eager's outputs are finite, or hold at least one finite value (or integer) to check against."""


@attrs.define(eq=False)
class ReferencePoint:
    label: str
    calls: list[ReferenceCall]


@attrs.define
class ValidationResult:
    passed: bool
    reason: str = ""
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    checked: list[str] = attrs.field(factory=list)
    """The points checked, each with all of its calls."""
    calls: int = 0
    duration_s: float = 0.0
    notes: list[str] = attrs.field(factory=list)
    """What limits how much a pass means (say, eager was never finite)."""


class EagerReference:
    """What eager returns at each validation point.

    A generated point that eager itself rejects (say, a sequence longer than the
    model's position table) is not a valid test; it is dropped and noted. A stored
    sample as recorded is what the user ran, so eager failing on it is an error.

    Values are compared where eager is finite, and NaN and infinity by position. Where
    eager is NaN or infinite everywhere, at every point, nothing can be compared, and
    every candidate fails, naming ``graph`` and the fix (:attr:`nothing_to_check`).
    """

    def __init__(
        self,
        module: Callable[..., Any],
        points: list[ValidationPoint],
        signature: ForwardSignature,
        device: torch.device,
        graph: str = "this graph",
    ) -> None:
        self.signature = signature
        self.device = device
        self.points: list[ReferencePoint] = []
        self.skipped: list[str] = []
        self.notes: list[str] = []
        self.nothing_to_check = ""
        """Why no candidate can be checked against eager here; empty when one can."""
        with torch.no_grad():
            for point in points:
                calls = []
                for name, arguments in zip(CALL_NAMES, point.calls, strict=False):
                    try:
                        calls.append(self._run_eager(module, name, arguments))
                    except Exception as error:
                        if point.recorded and not calls:
                            raise
                        self.skipped.append(f"{point.label}, {name}: eager raised {type(error).__name__}: {error}")
                        break
                if calls:
                    self.points.append(ReferencePoint(point.label, calls))
        every_call = [call for point in self.points for call in point.calls]
        if every_call and not any(call.checkable for call in every_call):
            self.nothing_to_check = NOTHING_TO_CHECK.format(graph=graph)
        elif every_call and not any(call.finite for call in every_call):
            self.notes.append(NO_FINITE_REFERENCE)

    def _run_eager(self, module: Callable[..., Any], name: str, arguments: dict[str, Any]) -> ReferenceCall:
        inputs = fresh_copy(arguments, self.device)
        args, kwargs = self.signature.bind(inputs)
        outputs = _owned(module(*args, **kwargs))
        written = {locator: tensor.detach() for locator, tensor in changed_inputs(arguments, inputs)}
        finite = find_non_finite(outputs) is None
        return ReferenceCall(name, arguments, outputs, written, finite, finite or has_checkable_value(outputs))

    @property
    def num_calls(self) -> int:
        return sum(len(point.calls) for point in self.points)

    def validate(self, candidate: Callable[..., Any], tolerances: Tolerances) -> ValidationResult:
        """Call ``candidate`` at every point, each call on fresh inputs; the first problem fails it."""
        start = time.perf_counter()
        result = ValidationResult(passed=True, notes=list(self.notes))
        if self.nothing_to_check:
            return _fail(result, self.nothing_to_check, start)
        with torch.no_grad():
            for point in self.points:
                for call in point.calls:
                    problem = self._check_call(candidate, call, tolerances, result)
                    result.calls += 1
                    if problem is not None:
                        return _fail(result, f"at {point.label}, {call.name}: {problem}", start)
                result.checked.append(point.label)
        result.duration_s = time.perf_counter() - start
        return result

    def _check_call(
        self, candidate: Callable[..., Any], call: ReferenceCall, tolerances: Tolerances, result: ValidationResult
    ) -> str | None:
        inputs = fresh_copy(call.arguments, self.device)
        args, kwargs = self.signature.bind(inputs)
        outputs = candidate(*args, **kwargs)
        comparison = Comparison()
        problem = self._input_problem(call, inputs, tolerances, comparison)
        if problem is None:
            comparison = compare_outputs(outputs, call.outputs, tolerances)
            problem = comparison.problem
        result.max_abs_error = max(result.max_abs_error, comparison.max_abs_error)
        result.max_rel_error = max(result.max_rel_error, comparison.max_rel_error)
        return problem

    def _input_problem(
        self, call: ReferenceCall, inputs: dict[str, Any], tolerances: Tolerances, comparison: Comparison
    ) -> str | None:
        """A write to an input that eager does not make; inputs eager writes must end up as eager's."""
        for locator, _tensor in changed_inputs(call.arguments, inputs):
            if locator not in call.written:
                return (
                    f"input `{locator.display_path}` was changed in place (eager leaves it as it was); "
                    "a backend must not write to its inputs: copy the tensor before an in-place operation"
                )
        for locator, expected in call.written.items():
            path = locator.display_path
            problem = compare_tensor(path, locator.get(inputs), expected, tolerances, comparison)
            if problem is not None:
                return f"input `{path}`, which eager changes in place, is not changed the same way: {problem}"
        return None


def _fail(result: ValidationResult, reason: str, start: float) -> ValidationResult:
    result.passed = False
    result.reason = reason if not result.notes else f"{reason} (note: {'; '.join(result.notes)})"
    result.duration_s = time.perf_counter() - start
    return result


def _owned(value: Any) -> Any:
    """Eager's outputs as copies: a module that reuses an output buffer must not change earlier references."""

    def copy(_locator: Locator, leaf: Any) -> Any:
        return leaf.detach().clone() if isinstance(leaf, torch.Tensor) and not leaf.is_meta else leaf

    return map_leaves(value, Locator(None), copy)
