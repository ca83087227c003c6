"""Which precision an engine computes in, and how TensorRT is told: builder flags or strong typing.

TensorRT has had two ways to run a float32 model in half precision:

* *weak typing* (TensorRT 8 to 10): the network keeps the model's float32 types and
  ``BuilderFlag.FP16`` / ``BuilderFlag.BF16`` let the builder pick lower-precision
  kernels layer by layer, falling back to float32 where it is not faster;
* *strong typing* (``NetworkDefinitionCreationFlag.STRONGLY_TYPED`` since TensorRT 9,
  the only mode of TensorRT 11, which removed those builder flags): every tensor has
  the type the ONNX model declares, so the model itself must be in half precision.

With ``strongly_typed=None`` the backend uses the flags where this TensorRT has them
and strong typing where it does not. For strong typing in fp16 or bf16, aitune exports
a copy of the module cast to that dtype, wrapped so that its inputs and outputs keep
their recorded dtypes (the cast happens inside the ONNX model): the engine then takes
and returns what eager does. Everything here is plain Python, decided from the
capabilities the installed TensorRT reports, so it is tested without TensorRT.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import attrs
import torch
import torch.utils._pytree as pytree

from aitune_core.plugin_api import Locator, Tolerances, map_leaves

PRECISIONS = ("fp32", "fp16", "bf16")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_FLAGS = {"fp16": "FP16", "bf16": "BF16"}


@attrs.frozen
class Capabilities:
    """What the installed TensorRT offers, by name (read by :func:`aitune_trt.engine.capabilities`).

    builder_flags: the ``trt.BuilderFlag`` members that exist (``FP16``, ``BF16``, ``TF32``).
    network_flags: the ``trt.NetworkDefinitionCreationFlag`` members that exist
        (``STRONGLY_TYPED``, ``EXPLICIT_BATCH``).
    """

    version: str
    builder_flags: frozenset[str]
    network_flags: frozenset[str]

    @property
    def major(self) -> int:
        head = self.version.split(".")[0]
        return int(head) if head.isdigit() else 0

    @property
    def always_strongly_typed(self) -> bool:
        """TensorRT 11 builds every network strongly typed and has no FP16/BF16 builder flags."""
        return self.major >= 11


@attrs.frozen
class PrecisionPlan:
    """How to build for one precision on one TensorRT.

    strongly_typed: create the network with ``STRONGLY_TYPED`` (where the flag exists).
    set_flags / clear_flags: ``trt.BuilderFlag`` names to set and to clear.
    export_dtype: cast the module to this dtype for export (strong typing in fp16/bf16).
    """

    precision: str
    strongly_typed: bool
    set_flags: tuple[str, ...] = ()
    clear_flags: tuple[str, ...] = ()
    export_dtype: torch.dtype | None = None

    def describe(self) -> str:
        mode = "strongly typed" if self.strongly_typed else "weakly typed"
        flags = f", flags {'+'.join(self.set_flags)}" if self.set_flags else ""
        cast = f", exported in {str(self.export_dtype).removeprefix('torch.')}" if self.export_dtype else ""
        return f"{self.precision} ({mode}{flags}{cast})"


class PrecisionError(ValueError):
    """The precision asked for cannot be built with the installed TensorRT."""


def plan_precision(precision: str, strongly_typed: bool | None, tf32: bool, caps: Capabilities) -> PrecisionPlan:
    """Decide flags, network typing and export dtype for ``precision`` on the TensorRT described by ``caps``."""
    if precision not in PRECISIONS:
        raise PrecisionError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    can_type_strongly = "STRONGLY_TYPED" in caps.network_flags or caps.always_strongly_typed
    if strongly_typed and not can_type_strongly:
        raise PrecisionError(f"TensorRT {caps.version} has no strongly typed networks (TensorRT 9 or newer has)")
    if strongly_typed is False and caps.always_strongly_typed:
        raise PrecisionError(f"TensorRT {caps.version} builds every network strongly typed; strongly_typed=False")
    tf32_set: tuple[str, ...] = ()
    tf32_clear: tuple[str, ...] = ()
    if "TF32" in caps.builder_flags:
        tf32_set, tf32_clear = (("TF32",), ()) if tf32 else ((), ("TF32",))
    if precision == "fp32":
        strong = bool(strongly_typed) or caps.always_strongly_typed
        return PrecisionPlan(precision, strong, set_flags=tf32_set, clear_flags=tf32_clear)
    flag = _FLAGS[precision]
    if strongly_typed is None:
        strongly_typed = flag not in caps.builder_flags
        if strongly_typed and not can_type_strongly:
            raise PrecisionError(
                f"TensorRT {caps.version} has neither BuilderFlag.{flag} nor strongly typed networks; "
                f"{precision} needs TensorRT 9 or newer"
            )
    if strongly_typed:
        # Precision flags are refused on strongly typed networks: the types come from the model.
        return PrecisionPlan(
            precision, True, set_flags=tf32_set, clear_flags=tf32_clear, export_dtype=DTYPES[precision]
        )
    if flag not in caps.builder_flags:
        raise PrecisionError(
            f"TensorRT {caps.version} has no BuilderFlag.{flag}; use strongly_typed=None or True for {precision}"
        )
    return PrecisionPlan(precision, False, set_flags=(flag, *tf32_set), clear_flags=tf32_clear)


def tolerances_for(precision: str, tf32: bool) -> Tolerances:
    """What validation against eager allows for: half-precision kernels, or TF32 matmuls in fp32."""
    if precision == "fp16":
        return Tolerances.uniform(atol=1e-2, rtol=1e-2)
    if precision == "bf16":
        return Tolerances.uniform(atol=5e-2, rtol=5e-2)
    if tf32:
        return Tolerances.uniform(atol=5e-3, rtol=5e-3)
    return Tolerances()


class CastModule(torch.nn.Module):
    """A copy of ``module`` in ``dtype`` that takes and returns the recorded dtypes.

    Floating inputs are cast to ``dtype`` on the way in and floating outputs back to
    their recorded dtype (by output locator) on the way out, so that the exported model
    does the casts and the engine's inputs and outputs stay those of the eager module.
    The copy leaves the user's module untouched, at the cost of a second set of weights
    while exporting.
    """

    def __init__(self, module: torch.nn.Module, dtype: torch.dtype, output_dtypes: Mapping[Locator, torch.dtype]):
        super().__init__()
        self.inner = copy.deepcopy(module).to(dtype)
        self.dtype = dtype
        self.output_dtypes = dict(output_dtypes)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        def cast_in(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.to(self.dtype) if tensor.is_floating_point() else tensor

        args, kwargs = pytree.tree_map_only(torch.Tensor, cast_in, (args, kwargs))
        outputs = self.inner(*args, **kwargs)

        def cast_out(locator: Locator, leaf: Any) -> Any:
            wanted = self.output_dtypes.get(locator)
            if isinstance(leaf, torch.Tensor) and wanted is not None and leaf.dtype != wanted:
                return leaf.to(wanted)
            return leaf

        return map_leaves(outputs, Locator(None), cast_out)
