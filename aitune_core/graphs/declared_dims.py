"""Dims the user declares: ``DynamicDim`` and ``BatchDim``, and the ``dynamic_shapes`` mapping they sit in.

Recorded calls only show the sizes that happened to be in the tuning data: record
sequence lengths 16 to 64 and a call at 300 falls back to eager. A declaration says
what the serving traffic will hold, so that backends are built, validated and routed
for all of it from the start (the dynamic-shapes RFC's min, opt and max).

The mapping is keyed by forward-parameter path, as the graph tables show it: a
parameter name (``"input_ids"``), a display path (``'opts["mask"]'``) or a tuple path
(``("opts", "mask")``). Each value maps an axis to a dim. A ``DynamicDim`` name used on
several tensors is one shared size, so its definitions must agree.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import attrs


def _check_range(kind: str, low: Any, opt: Any, high: Any) -> None:
    for label, value in (("min", low), ("opt", opt), ("max", high)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{kind}: {label} must be a whole number, got {value!r}")
    if not 0 < low <= opt <= high:
        raise ValueError(f"{kind}: need 0 < min <= opt <= max, got min={low}, opt={opt}, max={high}")


@attrs.frozen(init=False)
class DynamicDim:
    """An axis whose size varies on its own (a sequence length), from ``min`` to ``max``.

    opt: the size backends optimise for (TensorRT profiles); default the middle of the range.
    """

    name: str
    min: int
    max: int
    opt: int

    def __init__(self, name: str, min: int, max: int, opt: int | None = None) -> None:
        if not isinstance(name, str) or not name.isidentifier() or name == "batch":
            raise ValueError(
                f"DynamicDim: name must be an identifier such as 'seq' (not 'batch': use BatchDim), got {name!r}"
            )
        chosen = (min + max) // 2 if opt is None and isinstance(min, int) and isinstance(max, int) else opt
        _check_range(f"DynamicDim({name!r})", min, chosen, max)
        self.__attrs_init__(name, min, max, chosen)

    def describe(self) -> str:
        return f"{self.name} in [{self.min}, {self.max}], opt {self.opt}"


@attrs.frozen(init=False)
class BatchDim:
    """The batch axis, from ``min`` to ``max`` rows; every batch axis of a graph shares it.

    opt: the batch backends optimise for; default ``max``, where throughput is measured.
    """

    min: int
    max: int
    opt: int
    name: str = "batch"

    def __init__(self, min: int = 1, max: int | None = None, opt: int | None = None) -> None:
        if max is None:
            raise ValueError("BatchDim: give the largest batch served, e.g. BatchDim(max=64)")
        chosen = max if opt is None else opt
        _check_range("BatchDim", min, chosen, max)
        self.__attrs_init__(min, max, chosen, "batch")

    def describe(self) -> str:
        return f"batch in [{self.min}, {self.max}], opt {self.opt}"


Dim = DynamicDim | BatchDim
PathKey = str | tuple[Hashable, ...]


@attrs.frozen
class DeclaredAxis:
    """One declared axis: the path as the user wrote it, the axis and its dim."""

    path: PathKey
    axis: int
    dim: Dim

    @property
    def shown_path(self) -> str:
        return self.path if isinstance(self.path, str) else repr(self.path)


@attrs.frozen
class DynamicShapes:
    """A checked ``dynamic_shapes`` declaration of one wrapped module."""

    axes: tuple[DeclaredAxis, ...]

    @classmethod
    def parse(cls, declared: Mapping[Any, Any] | None) -> DynamicShapes | None:
        """Check the user's mapping; errors name the key and what to write instead."""
        if declared is None:
            return None
        if not isinstance(declared, Mapping):
            raise TypeError(
                "dynamic_shapes must be a dict {path: {axis: Dim}}, e.g. "
                '{"input_ids": {0: aitune_core.BatchDim(max=64), 1: aitune_core.DynamicDim("seq", min=1, max=512)}}, '
                f"got {type(declared).__name__}"
            )
        axes: list[DeclaredAxis] = []
        for path, dims in declared.items():
            _check_path(path)
            if not isinstance(dims, Mapping) or not dims:
                raise TypeError(f"dynamic_shapes[{path!r}] must be a non-empty dict {{axis: Dim}}, got {dims!r}")
            for axis, dim in dims.items():
                if isinstance(axis, bool) or not isinstance(axis, int) or axis < 0:
                    raise ValueError(f"dynamic_shapes[{path!r}]: axes are non-negative ints, got {axis!r}")
                if not isinstance(dim, (DynamicDim, BatchDim)):
                    raise TypeError(
                        f"dynamic_shapes[{path!r}][{axis}] must be a DynamicDim or BatchDim, got {type(dim).__name__}"
                    )
                axes.append(DeclaredAxis(path, axis, dim))
        _check_shared_names(axes)
        return cls(tuple(axes))

    def describe(self) -> list[str]:
        return [f"{axis.shown_path}[{axis.axis}]: {axis.dim.describe()}" for axis in self.axes]


def _check_path(path: Any) -> None:
    if isinstance(path, str) and path:
        return
    if isinstance(path, tuple) and path and isinstance(path[0], str):
        return
    raise TypeError(
        f"dynamic_shapes keys are parameter paths: a name ('input_ids'), a path as the graph tables print it "
        f"('opts[\"mask\"]') or a tuple (('opts', 'mask')); got {path!r}"
    )


def _check_shared_names(axes: list[DeclaredAxis]) -> None:
    first: dict[str, DeclaredAxis] = {}
    for declared in axes:
        seen = first.setdefault(declared.dim.name, declared)
        if (seen.dim.min, seen.dim.opt, seen.dim.max) != (declared.dim.min, declared.dim.opt, declared.dim.max):
            raise ValueError(
                f"dim `{declared.dim.name}` is declared twice with different ranges: {seen.dim.describe()} at "
                f"{seen.shown_path}[{seen.axis}] and {declared.dim.describe()} at "
                f"{declared.shown_path}[{declared.axis}]; one name is one size, so give both the same range "
                "or use two names"
            )


@attrs.frozen
class DeclaredRange:
    """A declared axis as it applies to one graph: kept in checkpoints and shown by ``aitune inspect``.

    follows: the axis was not declared, but its size equalled the declared one's in
        every recorded call (an attention mask's length), so it takes the same range.
    """

    path: str
    axis: int
    name: str
    min: int
    opt: int
    max: int
    follows: bool = False

    def describe(self) -> str:
        how = " (follows the recorded sizes)" if self.follows else ""
        return f"{self.path}[{self.axis}]: {self.name} in [{self.min}, {self.max}], opt {self.opt}{how}"
