"""Checking a candidate's outputs: finite, the right structure and shapes, and close to eager.

Each check returns the first problem found as a sentence that names the output by
its access path, because "validation failed" alone tells a user nothing.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import torch

from aitune_core.backends.tolerances import Tolerances
from aitune_core.metadata.locator import walk_outputs


@attrs.define
class Comparison:
    """Outcome of comparing one call's outputs; ``max_abs_error`` spans all float outputs."""

    problem: str | None = None
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0


def _not_finite(leaf: Any) -> bool:
    if isinstance(leaf, torch.Tensor):
        if leaf.is_floating_point() or leaf.is_complex():
            return not bool(torch.isfinite(leaf).all())
        return False
    if isinstance(leaf, float) and not isinstance(leaf, bool):
        return not math.isfinite(leaf)
    return False


def find_non_finite(outputs: Any) -> str | None:
    """The access path of the first NaN or infinite value in nested outputs, if any."""
    for locator, leaf in walk_outputs(outputs):
        if _not_finite(leaf):
            return locator.display_path
    return None


def has_checkable_value(outputs: Any) -> bool:
    """Whether eager's outputs hold a value a candidate's can be checked against.

    A finite float is one, and so is any integer or boolean; NaN and infinity are not:
    a candidate off by half gives them back unchanged, so matching them proves nothing.
    """
    for _locator, leaf in walk_outputs(outputs):
        if isinstance(leaf, torch.Tensor):
            if leaf.is_meta or leaf.numel() == 0:
                continue
            if not (leaf.is_floating_point() or leaf.is_complex()) or bool(torch.isfinite(leaf).any()):
                return True
        elif isinstance(leaf, (int, float)) and not _not_finite(leaf):
            return True
    return False


def compare_outputs(candidate: Any, reference: Any, tolerances: Tolerances) -> Comparison:
    """Compare nested outputs leaf by leaf with eager's at the same inputs.

    A candidate must be NaN or infinite exactly where eager is, element by element.
    """
    result = Comparison()
    got = list(walk_outputs(candidate))
    want = list(walk_outputs(reference))
    got_paths = [locator.display_path for locator, _ in got]
    want_paths = [locator.display_path for locator, _ in want]
    if got_paths != want_paths:
        result.problem = f"output structure differs from eager: got {got_paths[:6]}, expected {want_paths[:6]}"
        return result
    for (locator, value), (_, expected) in zip(got, want, strict=True):
        path = locator.display_path
        if isinstance(expected, torch.Tensor):
            problem = compare_tensor(path, value, expected, tolerances, result)
        elif isinstance(expected, (int, float)) and not isinstance(expected, bool):
            problem = _compare_number(path, value, expected, tolerances, result)
        else:
            problem = _compare_other(path, value, expected)
        if problem is not None:
            result.problem = problem
            return result
    return result


def quickly_close(candidate: Any, reference: Any, tolerances: Tolerances) -> bool:
    """True only where :func:`compare_outputs` finds nothing, in a few tensor operations; False: ask it.

    For checks made often (spot checks while serving): outputs that are all real or
    integer tensors of eager's shapes and dtypes, every value finite, are compared whole
    by the same rule (within ``atol + rtol * |eager|``, in float64, integers exactly).
    Anything else (a NaN or an infinity included) and any mismatch is left to
    :func:`compare_outputs` and its message.
    """
    got, want = list(walk_outputs(candidate)), list(walk_outputs(reference))
    if len(got) != len(want):
        return False
    for (locator, value), (expected_locator, expected) in zip(got, want, strict=True):
        if locator != expected_locator or not isinstance(value, torch.Tensor) or not isinstance(expected, torch.Tensor):
            return False
        if value.shape != expected.shape or value.dtype != expected.dtype or expected.is_complex() or expected.is_meta:
            return False
        actual = value.detach().to(expected.device)
        if not expected.is_floating_point():
            if not torch.equal(actual, expected):
                return False
            continue
        tolerance = tolerances.for_dtype(expected.dtype)
        wanted = expected.detach().double()
        bound = wanted.abs().mul_(tolerance.rtol).add_(tolerance.atol)
        if not bool((actual.double() - wanted).abs_().le_(bound).all()):  # False at any NaN or infinity
            return False
    return True


OPAQUE_FIX = (
    "register its type as a container so that its tensors are compared "
    "(aitune_core.register_container, or a plugin's aitune_register_containers hook; "
    "aitune-transformers registers transformers' caches), or leave it out of the outputs "
    "(for a language model, pass use_cache=False)"
)


def _compare_other(path: str, value: Any, expected: Any) -> str | None:
    """Plain values by ``==``; an object aitune cannot look into is named, with the fix, not shown twice."""
    if type(value) is not type(expected):
        return f"`{path}` is a {type(value).__name__}, eager gives a {type(expected).__name__}"
    if type(expected).__eq__ is object.__eq__:
        if value is expected:
            return None
        return f"`{path}` is a {type(expected).__qualname__}, which aitune cannot look into to compare: {OPAQUE_FIX}"
    try:
        same = bool(value == expected)
    except Exception as error:  # an __eq__ that cannot answer (tensors inside) is not a verdict
        return f"`{path}` ({type(expected).__qualname__}) cannot be compared ({type(error).__name__}): {OPAQUE_FIX}"
    if same:
        return None
    shown, wanted = repr(value), repr(expected)
    if shown == wanted:
        kind = type(expected).__qualname__
        return f"`{path}` ({kind}) differs from eager's in what its repr does not show: {OPAQUE_FIX}"
    return f"`{path}` is {shown}, eager gives {wanted}"


def _compare_number(path: str, value: Any, expected: float, tolerances: Tolerances, result: Comparison) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"`{path}` is a {type(value).__name__}, eager gives a number"
    if _not_finite(float(expected)) or _not_finite(float(value)):
        # NaN and infinity are compared by position: each side must have exactly the other's.
        same = (math.isnan(value) and math.isnan(expected)) or value == expected
        return None if same else f"`{path}` is {value}, eager gives {expected}"
    tolerance = tolerances.for_dtype(torch.float64 if isinstance(expected, float) else torch.int64)
    error = abs(value - expected)
    result.max_abs_error = max(result.max_abs_error, float(error))
    if error > tolerance.atol + tolerance.rtol * abs(expected):
        return f"`{path}` is {value}, eager gives {expected} (error {error:.3g})"
    return None


def compare_tensor(
    path: str, value: Any, expected: torch.Tensor, tolerances: Tolerances, result: Comparison
) -> str | None:
    """Compare one tensor with eager's; the errors measured are added to ``result``.

    NaN and infinity must sit exactly where eager has them (an infinity with its sign):
    a tolerance says nothing about them, so any other rule would let a backend that is
    wrong at those positions, or NaN where eager is finite, pass.
    """
    if not isinstance(value, torch.Tensor):
        return f"`{path}` is a {type(value).__name__}, eager gives a tensor"
    if value.shape != expected.shape:
        return f"`{path}` has shape {list(value.shape)}, eager gives {list(expected.shape)}"
    if value.dtype != expected.dtype:
        return f"`{path}` has dtype {value.dtype}, eager gives {expected.dtype}"
    if expected.numel() == 0 or expected.is_meta:
        return None
    actual = value.detach().to(expected.device)
    wanted = expected.detach()
    if not (wanted.is_floating_point() or wanted.is_complex()):
        if not torch.equal(actual, wanted):
            mismatched = int((actual != wanted).sum())
            return f"`{path}` differs from eager in {mismatched} of {wanted.numel()} elements (exact match required)"
        return None
    actual64, wanted64 = _as_float64(actual), _as_float64(wanted)
    finite = torch.isfinite(wanted64)
    if not bool(finite.all()):
        same_special = (actual64 == wanted64) | (torch.isnan(actual64) & torch.isnan(wanted64))
        wrong = (~finite) & ~same_special
        if bool(wrong.any()):
            first = int(wrong.reshape(-1).nonzero()[0])
            return (
                f"`{path}` differs from eager where eager is NaN or infinite, at {int(wrong.sum())} of "
                f"{wanted64.numel()} elements (first at flat index {first}: "
                f"{float(actual64.reshape(-1)[first])}, eager gives {float(wanted64.reshape(-1)[first])})"
            )
    special = finite & ~torch.isfinite(actual64)
    if bool(special.any()):
        first = int(special.reshape(-1).nonzero()[0])
        return (
            f"`{path}` has NaN or infinite values where eager is finite, at {int(special.sum())} of "
            f"{wanted64.numel()} elements (first at flat index {first})"
        )
    zero = torch.zeros((), dtype=torch.float64, device=wanted64.device)
    difference = (actual64 - wanted64).abs().where(finite, zero)
    magnitude = wanted64.abs().where(finite, zero)
    max_abs = float(difference.max())
    max_rel = float((difference / magnitude.clamp_min(1e-12)).where(magnitude > 0, difference).max())
    result.max_abs_error = max(result.max_abs_error, max_abs)
    result.max_rel_error = max(result.max_rel_error, max_rel)
    tolerance = tolerances.for_dtype(expected.dtype)
    bound = tolerance.atol + tolerance.rtol * magnitude
    outside = difference > bound
    if bool(outside.any()):
        worst = int((difference - bound).argmax())
        return (
            f"`{path}` differs from eager: max abs error {max_abs:.3g}, max rel error {max_rel:.3g} "
            f"at {int(outside.sum())} of {wanted64.numel()} elements "
            f"(allowed atol={tolerance.atol:g}, rtol={tolerance.rtol:g}; worst at flat index {worst})"
        )
    return None


def _as_float64(tensor: torch.Tensor) -> torch.Tensor:
    """Real tensors in float64; complex ones as (real, imaginary) pairs, so neither part is dropped."""
    if tensor.is_complex():
        return torch.view_as_real(tensor.resolve_conj().to(torch.complex128))
    return tensor.double()
