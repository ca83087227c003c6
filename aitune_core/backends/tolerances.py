"""Tolerances per dtype for comparing a candidate's outputs with eager.

An element passes when ``|candidate - eager| <= atol + rtol * |eager|``, as in
``torch.allclose``. Integer and boolean outputs must match exactly. Backends that
change numerics on purpose (quantization, reduced precision) declare wider defaults,
and users can override any of them.
"""

from __future__ import annotations

import attrs
import torch


@attrs.frozen
class Tolerance:
    atol: float
    rtol: float

    def __attrs_post_init__(self) -> None:
        if self.atol < 0 or self.rtol < 0:
            raise ValueError(f"tolerances must be non-negative, got atol={self.atol}, rtol={self.rtol}")


DEFAULT_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(atol=1e-7, rtol=1e-7),
    torch.float32: Tolerance(atol=1e-4, rtol=1e-3),
    torch.float16: Tolerance(atol=1e-2, rtol=1e-2),
    torch.bfloat16: Tolerance(atol=5e-2, rtol=5e-2),
}
EXACT = Tolerance(atol=0.0, rtol=0.0)


@attrs.frozen
class Tolerances:
    """Tolerances by dtype; dtypes not listed fall back to the defaults, or exact for non-floats."""

    by_dtype: dict[torch.dtype, Tolerance] = attrs.field(factory=dict)

    def for_dtype(self, dtype: torch.dtype) -> Tolerance:
        if dtype in self.by_dtype:
            return self.by_dtype[dtype]
        if dtype in DEFAULT_TOLERANCES:
            return DEFAULT_TOLERANCES[dtype]
        if dtype.is_floating_point or dtype.is_complex:
            return DEFAULT_TOLERANCES[torch.float32]
        return EXACT

    def merged(self, override: Tolerances | None) -> Tolerances:
        """These tolerances with ``override``'s entries on top."""
        if override is None:
            return self
        return Tolerances({**self.by_dtype, **override.by_dtype})

    @classmethod
    def uniform(cls, atol: float, rtol: float) -> Tolerances:
        """The same tolerance for every floating dtype (quantized backends use this)."""
        tolerance = Tolerance(atol, rtol)
        return cls({dtype: tolerance for dtype in DEFAULT_TOLERANCES})
