"""A stand-in for TensorRT, for testing everything around it on a machine without a GPU.

:class:`OrtTensorRTBackend` is a :class:`~aitune_trt.TensorRTBackend` whose three
TensorRT steps are replaced: its "plan" is the exported ONNX model with the profiles
in a small header, and its "engine" (:class:`OrtEngine`) runs that model with ONNX
Runtime on the CPU while holding every call to the profile the runner chose, as
TensorRT would. Everything else is the real backend: profile computation and checks,
the ONNX export, the precision plan, the runner's profile selection, dtype and device
handling, nested outputs, the plan and profiles artifacts, and the lifecycle.

What it checks is aitune-trt's orchestration, not TensorRT: parsing, building,
kernel selection and TensorRT's numerics are never exercised. Tests that need those
are marked ``gpu`` and run on a machine with TensorRT and CUDA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch

from aitune_core.plugin_api import Availability
from aitune_trt.backend import TensorRTBackend
from aitune_trt.options import BuildOptions, BuildResult
from aitune_trt.precision import Capabilities
from aitune_trt.profiles import TensorRTProfile, profiles_from_json, profiles_to_json
from aitune_trt.runner import EngineSession

MAGIC = b"AITUNE-ORT-PLAN\n"
REFITTABLE_MAGIC = b"AITUNE-ORT-PLAR\n"
"""The stand-in plan of an engine built refittable: its initializers can be replaced by name."""

TENSORRT_10 = Capabilities("10.8.0", frozenset({"FP16", "BF16", "TF32"}), frozenset({"STRONGLY_TYPED"}))
TENSORRT_11 = Capabilities("11.0.0", frozenset({"TF32"}), frozenset({"STRONGLY_TYPED"}))

_ORT_TYPES = {
    "tensor(float)": torch.float32,
    "tensor(float16)": torch.float16,
    "tensor(bfloat16)": torch.bfloat16,
    "tensor(double)": torch.float64,
    "tensor(int8)": torch.int8,
    "tensor(uint8)": torch.uint8,
    "tensor(int32)": torch.int32,
    "tensor(int64)": torch.int64,
    "tensor(bool)": torch.bool,
}


def write_plan(onnx_path: Path, profiles: tuple[TensorRTProfile, ...], refittable: bool = False) -> bytes:
    """The stand-in plan: a header with the profiles, then the ONNX model with its weights inline."""
    import onnx

    model = onnx.load(str(onnx_path))  # external data, if any, is read in
    return _plan(profiles, model.SerializeToString(), refittable)


def _plan(profiles: Sequence[TensorRTProfile], model: bytes, refittable: bool) -> bytes:
    header = profiles_to_json(profiles).encode()
    return (REFITTABLE_MAGIC if refittable else MAGIC) + len(header).to_bytes(8, "little") + header + model


def read_plan(plan: bytes) -> tuple[list[TensorRTProfile], bytes]:
    if not plan.startswith((MAGIC, REFITTABLE_MAGIC)):
        raise ValueError("not a plan written by aitune_trt.testing.write_plan")
    start = len(MAGIC) + 8
    size = int.from_bytes(plan[len(MAGIC) : start], "little")
    return profiles_from_json(plan[start : start + size].decode()), plan[start + size :]


class ProfiledStandIn:
    """The profile half of an :class:`~aitune_trt.runner.EngineSession`, for engine stand-ins.

    A TensorRT engine reports each profile's shapes as it holds them; a stand-in holds
    the profiles aitune wrote, and reports those.
    """

    def __init__(self, profiles: list[TensorRTProfile]) -> None:
        self.profiles = profiles

    @property
    def num_profiles(self) -> int:
        return len(self.profiles)

    def profile_shapes(self, name: str, index: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        entry = self.profiles[index].entry(name)
        return entry.min, entry.opt, entry.max


class OrtEngine(ProfiledStandIn):
    """An :class:`~aitune_trt.runner.EngineSession` that runs the plan's ONNX model with ONNX Runtime.

    Like a TensorRT engine it refuses shapes outside the profile a call runs with.
    ``profiles_used`` lists the profile of every call, for tests of the selection.
    """

    def __init__(self, plan: bytes, device: torch.device) -> None:
        profiles, model = read_plan(plan)
        super().__init__(profiles)
        self.refittable = plan.startswith(REFITTABLE_MAGIC)
        self.model = model
        self.session = self._session(model)
        self.device = torch.device("cpu")  # ONNX Runtime's CPU provider, whatever device was asked for
        self.requested_device = device
        self.input_names = [value.name for value in self.session.get_inputs()]
        self.output_names = [value.name for value in self.session.get_outputs()]
        self.input_dtypes = {v.name: _ORT_TYPES[v.type] for v in self.session.get_inputs()}
        self.output_dtypes = {v.name: _ORT_TYPES[v.type] for v in self.session.get_outputs()}
        self.profiles_used: list[int] = []
        self.refits = 0

    @staticmethod
    def _session(model: bytes) -> Any:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = 1
        return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def refit(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Replace the model's initializers named in ``weights``, as TensorRT's refitter replaces its weights."""
        import onnx
        from onnx import numpy_helper

        if not self.refittable:
            raise RuntimeError("the engine was not built refittable")
        model = onnx.load_model_from_string(self.model)
        for initializer in model.graph.initializer:
            value = weights.get(initializer.name)
            if value is None:
                continue
            if tuple(value.shape) != tuple(initializer.dims):
                raise RuntimeError(f"weights {initializer.name!r} have shape {tuple(value.shape)}")
            initializer.CopyFrom(numpy_helper.from_array(value.detach().cpu().numpy(), initializer.name))
        self.model = model.SerializeToString()
        self.session = self._session(self.model)
        self.refits += 1

    def serialize(self) -> bytes:
        return _plan(self.profiles, self.model, self.refittable)

    def run(self, profile: int, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        for name, tensor in inputs.items():
            entry = self.profiles[profile].entry(name)
            if not entry.contains(tuple(tensor.shape)):
                raise RuntimeError(f"input {name} shape {list(tensor.shape)} is outside profile {profile}")
            if tensor.dtype != self.input_dtypes[name] or not tensor.is_contiguous() or tensor.device != self.device:
                raise RuntimeError(f"input {name} was not prepared for the engine")
        self.profiles_used.append(profile)
        feed = {name: tensor.numpy() for name, tensor in inputs.items()}
        outputs = self.session.run(self.output_names, feed)
        return {name: torch.from_numpy(array) for name, array in zip(self.output_names, outputs, strict=True)}


class OrtTensorRTBackend(TensorRTBackend):
    """A TensorRTBackend that runs on the CPU, with ONNX Runtime standing in for TensorRT.

    capabilities: the TensorRT version and flags to plan precision for.
    ``plans_built`` and ``engines_opened`` count the stand-in builds and loads across
    instances, so a test can check that restoring from a checkpoint builds nothing.
    """

    capabilities: ClassVar[Capabilities] = TENSORRT_10
    plans_built: ClassVar[int] = 0
    engines_opened: ClassVar[int] = 0

    def __init__(self, config: Any = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.last_options: BuildOptions | None = None

    @classmethod
    def availability(cls, device: torch.device | str) -> Availability:
        return Availability.yes()

    def _capabilities(self) -> Capabilities:
        return self.capabilities

    def _build_plan(self, onnx_path: Path, options: BuildOptions) -> BuildResult:
        type(self).plans_built += 1
        self.last_options = options
        return BuildResult(write_plan(onnx_path, options.profiles, options.refittable), (), self.capabilities.version)

    def _open_engine(self, plan_path: Path, device: torch.device) -> EngineSession:
        type(self).engines_opened += 1
        return OrtEngine(plan_path.read_bytes(), device)
