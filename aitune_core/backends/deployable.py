"""A backend's winner as a standalone artifact: the files a server loads, and what they take and give.

An inference server (Triton, OpenVINO Model Server) runs a model from files, with no
aitune and none of the model's Python code. A backend whose winner is such a file (an
ONNX model, an OpenVINO IR, an AOT Inductor ``.pt2`` package, a TensorRT plan)
describes it here as data, through :meth:`aitune_core.backends.base.Backend.deployable`:
its files, their format, every input and output by the name the runtime knows it by
with its dtype, smallest and largest shape and batch axis, and the runtime options it
was validated and timed with. Deploy targets turn this description into a server's
configuration; they never ask the backend anything else.

These classes import nothing of the backend contract, so that describing an artifact
costs a backend author nothing at import time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.metadata.tensor_spec import TensorSpec

FORMATS = ("onnx", "openvino_ir", "aoti_pt2", "tensorrt_plan")
"""The artifact formats deploy targets know: an ONNX model, an OpenVINO IR (``.xml`` and ``.bin``),
an AOT Inductor package and a serialized TensorRT engine."""
DEVICES = ("cpu", "cuda")


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(int(size) for size in value)


def _read_only(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(sorted(value.items()))


def _items(value: Iterable[Any]) -> tuple[Any, ...]:
    """``tuple`` as a converter, typed: mypy's attrs plugin cannot solve the builtin's type variable."""
    return tuple(value)


@attrs.frozen
class TensorIO:
    """One input or output of an artifact, by the name its runtime knows it by.

    ``min_shape`` and ``max_shape`` bound every axis (equal on a fixed one);
    ``batch_axis`` is the axis that holds one row per sample of the batch, or None when
    the tensor has none (its size then does not follow the batch).
    """

    name: str
    dtype: torch.dtype
    min_shape: tuple[int, ...] = attrs.field(converter=_shape)
    max_shape: tuple[int, ...] = attrs.field(converter=_shape)
    batch_axis: int | None = None

    def __attrs_post_init__(self) -> None:
        if not self.name:
            raise ValueError("an artifact's input or output needs a name")
        if len(self.min_shape) != len(self.max_shape):
            raise ValueError(f"{self.name}: min shape {self.min_shape} and max shape {self.max_shape} differ in rank")
        if any(low < 0 or low > high for low, high in zip(self.min_shape, self.max_shape, strict=True)):
            raise ValueError(f"{self.name}: min shape {self.min_shape} is not within max shape {self.max_shape}")
        if self.batch_axis is not None and not 0 <= self.batch_axis < len(self.min_shape):
            raise ValueError(f"{self.name}: batch axis {self.batch_axis} is not an axis of a rank-{self.rank} tensor")

    @property
    def rank(self) -> int:
        return len(self.min_shape)

    def varies(self, axis: int) -> bool:
        """Whether the size of ``axis`` changes from call to call (the batch axis included)."""
        return self.min_shape[axis] != self.max_shape[axis]

    @classmethod
    def of_spec(cls, name: str, spec: TensorSpec) -> TensorIO:
        """The tensor a graph spec recorded, under ``name``; its batch axis is the one that is the batch itself.

        An axis holding several rows per sample (``2 * batch``) is ranged like any other, but
        is no batch axis: a server that stacks requests along it would mix the samples' rows.
        """
        axes = [axis for axis, multiplier in spec.get_batch_axis_multipliers().items() if multiplier == 1]
        return cls(name, spec.dtype, spec.min_shape, spec.max_shape, axes[0] if axes else None)


@attrs.frozen
class ProfileShapes:
    """The smallest, typical and largest shape of one input in an optimization profile."""

    name: str
    min: tuple[int, ...] = attrs.field(converter=_shape)
    opt: tuple[int, ...] = attrs.field(converter=_shape)
    max: tuple[int, ...] = attrs.field(converter=_shape)


@attrs.frozen
class OptimizationProfile:
    """One TensorRT optimization profile: a shape range for every input, in the engine's input order."""

    inputs: tuple[ProfileShapes, ...] = attrs.field(converter=_items)


@attrs.frozen
class RuntimeOptions:
    """The runtime settings the artifact was validated and timed with, as far as they change what a server does.

    device: ``"cpu"`` or ``"cuda"``, where the artifact runs (AOT packages and engines are
        built for one).
    threads: the threads one call used (intra-op); None: torch's thread count, which the
        checkpoint records as the one it was tuned at (the export fills it in); 0: the
        runtime chose.
    precision: the precision it computes in: ``"fp32"`` (as eager), or ``"fp16"``,
        ``"bf16"``, ``"tf32"``, ``"int8"`` where the backend was lossy on purpose.
    profiles: TensorRT optimization profiles, in the engine's order.
    settings: the runtime's own options, by the runtime's own names, that the backend
        set (``{"graph_optimization_level": "all"}``); targets map those they know.
    """

    device: str = attrs.field(default="cpu", validator=attrs.validators.in_(DEVICES))
    threads: int | None = None
    precision: str = "fp32"
    profiles: tuple[OptimizationProfile, ...] = attrs.field(default=(), converter=_items)
    settings: Mapping[str, str] = attrs.field(factory=dict, converter=_read_only)


@attrs.frozen
class Deployable:
    """A standalone artifact: what a server needs to run one graph without aitune.

    format: one of :data:`FORMATS`.
    files: each file by the name the runtime expects it under, next to the others (an
        ONNX model's external data file is looked up by the name the model records), and
        where it is now.
    entry: the name in ``files`` that the runtime opens (``model.onnx``, ``model.xml``).
    inputs, outputs: every tensor the artifact takes and gives, in its own order.
    runtime: how it was run when it was validated and timed.
    """

    format: str = attrs.field(validator=attrs.validators.in_(FORMATS))
    files: Mapping[str, Path] = attrs.field(converter=_read_only)
    entry: str
    inputs: tuple[TensorIO, ...] = attrs.field(converter=_items)
    outputs: tuple[TensorIO, ...] = attrs.field(converter=_items)
    runtime: RuntimeOptions = attrs.field(factory=RuntimeOptions)

    def __attrs_post_init__(self) -> None:
        if self.entry not in self.files:
            raise ValueError(f"the entry file {self.entry!r} is not among the artifact's files {sorted(self.files)}")
        for name in self.files:
            if not name or "/" in name or "\\" in name or name in (".", ".."):
                raise ValueError(f"artifact file names are bare file names, got {name!r}")
        names = [tensor.name for tensor in (*self.inputs, *self.outputs)]
        if not self.inputs or not self.outputs or len(set(names)) != len(names):
            raise ValueError(f"an artifact needs inputs and outputs with names of their own, got {names}")

    @property
    def batch_axes(self) -> set[int | None]:
        """The batch axes of its inputs and outputs: ``{0}`` when every one is batched on its first axis."""
        return {tensor.batch_axis for tensor in (*self.inputs, *self.outputs)}


def device_of(graph: GraphSpec) -> str:
    """The device type a graph was tuned on (``"cpu"`` or ``"cuda"``), read from its key's tensor parts."""
    found: set[str] = set()

    def walk(part: Any) -> None:
        if isinstance(part, tuple):
            if len(part) == 4 and part[0] == "T" and isinstance(part[3], str):
                found.add(part[3])
            else:
                for child in part:
                    walk(child)

    walk(graph.key)
    return "cuda" if "cuda" in found else "cpu"
