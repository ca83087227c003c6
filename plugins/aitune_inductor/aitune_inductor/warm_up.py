"""What a JIT build's warm-up reports, and how it marks the axes of calls it did not see.

Kept apart from :mod:`aitune_inductor.jit` so that the backend's lifecycle reads on its
own; the precompiled path (:mod:`aitune_inductor.precompiled`) marks its calls the same way.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from aitune_core.plugin_api import BuildContext, Locator
from aitune_inductor.dims import mark_dynamic


@attrs.frozen
class WarmUp:
    """What a build's warm-up reports.

    marked: the axes marked dynamic, with their ranges.
    bounds_dropped: why the tuned bounds were given up, when the model contradicted them.
    size_one: "shared" when size 1 runs on the one graph; "recompiled: <guard>" when torch
        still compiled another (a convolution picks its kernel by batch size); "own graph:
        <why>" when the shared graph was wrong at size 1 and the range starts at 2; "" when
        no range reaches size 1.
    """

    marked: list[str]
    bounds_dropped: str = ""
    size_one: str = ""
    kind: str = "bounded"


BOUNDED = "bounded"
"""Ranged axes marked with their tuned bounds from size 2 (``TorchInductorJitBackend._warm_up``)."""
UNBOUNDED = "unbounded"
"""The model contradicted the bounds: axes only hinted dynamic."""
FROM_ONE = "from_one"
"""Bounds from size 1, first call reasoned size-obliviously (:mod:`aitune_inductor.size_one`)."""


def mark_first_call(kind: str, context: BuildContext, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Mark the axes of the first call of a compile without samples as the build's compile marked them."""
    arguments = context.signature.normalize(args, kwargs)
    if kind == FROM_ONE:
        mark_dynamic(arguments, context.graph_spec, bounded=True, floor=1)
    else:
        mark_dynamic(arguments, context.graph_spec, bounded=kind == BOUNDED)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def unmarked(_locator: Locator, leaf: Any) -> Any:
    """A copy without Dynamo's dynamic-dim marks, which live on the tensor object."""
    return leaf.clone() if isinstance(leaf, torch.Tensor) else leaf


def violates_bounds(error: BaseException) -> bool:
    """Whether Dynamo refused the marked ranges (the model specialises or relates those axes)."""
    seen: BaseException | None = error
    while seen is not None:
        if "Constraint" in type(seen).__name__ or "Constraints violated" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
