"""Named quantization recipes: the torchao config each one builds and the hardware it needs.

A preset is a name a config can store and a checkpoint can carry ("int8wo"), mapped
to one of the installed torchao's config classes when a backend is built. Each preset
declares where it can run, so that strategies skip it on a machine that lacks the
hardware with a reason ("needs CUDA compute capability >= 8.9") instead of failing
halfway through a build with a kernel error.

The table follows torchao 0.18 (``torchao.quantization`` and the prototype
``torchao.prototype.mx_formats``). On the CPU, torchao 0.18 runs int8 weight-only and
int8 dynamic-activation quantization; its default int4 weight-only config packs for
the CUDA kernels of the ``mslk`` package (int4 on the CPU exists only as the prototype
``PrototypeInt4WeightOnlyConfig``, usable as an explicit config), and float8, MX and
NVFP4 need recent GPUs.

Each preset is data: the config class by name and the keyword arguments it is made
with. Nothing here imports torchao: :meth:`Preset.make` imports the class when it is
called.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Mapping
from typing import Any

import attrs
import torch

from aitune_core.plugin_api import Availability


@attrs.frozen
class Preset:
    """One recipe.

    config_class: the torchao class ``make`` builds, as ``module:Name`` (shown to users,
        and checked for when ``prototype`` is set, since prototypes come and go).
    options: the keyword arguments it is made with. Those ending in ``_dtype`` name a
        torch dtype (``"float8_e4m3fn"``), looked up when the config is made: torch has
        float4 only from 2.8 on, and the plugin must import on older ones.
    devices: the device types it runs on; ``min_cuda_capability`` narrows CUDA further.
    packages: importable modules it needs beyond torchao, with why.
    atol, rtol: the starting tolerances against eager; quantization changes numerics
        on purpose, so fp32 defaults would reject every candidate.
    compiled_on: the device types where the preset's default candidate runs under
        ``torch.compile``, because there compiling is what makes it pay (see
        :data:`COMPILED_ON_CPU`).
    """

    name: str
    summary: str
    config_class: str
    options: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    devices: tuple[str, ...] = ("cpu", "cuda")
    min_cuda_capability: tuple[int, int] | None = None
    packages: tuple[tuple[str, str], ...] = ()
    atol: float = 5e-2
    rtol: float = 5e-2
    prototype: bool = False
    compiled_on: tuple[str, ...] = ()

    def make(self) -> Any:
        """The torchao config object; this imports torchao."""
        options = {
            key: getattr(torch, value) if key.endswith("_dtype") else value for key, value in self.options.items()
        }
        return getattr(importlib.import_module(self.module), self.class_name)(**options)

    @property
    def module(self) -> str:
        return self.config_class.partition(":")[0]

    @property
    def class_name(self) -> str:
        return self.config_class.partition(":")[2]

    def hardware(self) -> str:
        """What it needs, in words: "CPU or CUDA", "CUDA with compute capability >= 8.9"."""
        names = {"cpu": "CPU", "cuda": "CUDA"}
        text = " or ".join(names.get(device, device) for device in self.devices)
        if self.min_cuda_capability is not None:
            major, minor = self.min_cuda_capability
            text += f" with compute capability >= {major}.{minor}"
        return text

    def availability(self, device: torch.device | str) -> Availability:
        """Whether this preset can run on ``device``; the reason names what is missing."""
        device = torch.device(device)
        if device.type not in self.devices:
            return Availability.no(f"preset {self.name!r} needs {self.hardware()}, not {device.type}")
        if device.type == "cuda":
            if not torch.cuda.is_available():
                return Availability.no(f"preset {self.name!r} needs {self.hardware()}; no CUDA device is visible")
            if self.min_cuda_capability is not None:
                have = torch.cuda.get_device_capability(device)
                if tuple(have) < self.min_cuda_capability:
                    return Availability.no(
                        f"preset {self.name!r} needs {self.hardware()}; {torch.cuda.get_device_name(device)} "
                        f"has {have[0]}.{have[1]}"
                    )
        for package, why in self.packages:
            if importlib.util.find_spec(package) is None:
                return Availability.no(f"preset {self.name!r} needs {package} ({why}), which is not installed")
        if self.prototype:
            return _class_availability(self)
        return Availability.yes()


def _class_availability(preset: Preset) -> Availability:
    """Prototype configs are checked for in the installed torchao (this imports torchao)."""
    try:
        found = hasattr(importlib.import_module(preset.module), preset.class_name)
    except ImportError as error:
        return Availability.no(f"preset {preset.name!r}: cannot import {preset.module} ({error})")
    if not found:
        version = importlib.metadata.version("torchao")
        return Availability.no(f"preset {preset.name!r}: the installed torchao {version} has no {preset.class_name}")
    return Availability.yes()


_QUANTIZATION = "torchao.quantization"
_MX_FORMATS = "torchao.prototype.mx_formats"
_CUDA = ("cuda",)
_KEEP_INDUCTOR: Mapping[str, Any] = {"set_inductor_config": False}
"""torchao's default changes Inductor's process-wide settings, and so every compiling backend tuned later."""
COMPILED_ON_CPU = ("cpu",)
"""Where ``int8dq`` is offered compiled. Uncompiled on a CPU, torchao 0.18 quantizes the
activations, multiplies in int8 and rescales op by op; Inductor fuses them around oneDNN's
int8 GEMM. Measured on an MLP 512-1024-512, one thread, medians of 21 alternating rounds
(compiled once, serving batch 1 and 32): at batch 32 ``int8dq`` ran 0.84x eager fp32
uncompiled and 1.76x compiled; at batch 1 neither paid (0.13x, 0.41x). ``int8wo`` turns its
int8 weight back to float on every call, compiled or not (0.87x and 0.85x at batch 32), so
compiling it only adds the compile."""
_MSLK = ("mslk", "the CUDA int4 kernels torchao's Int4WeightOnlyConfig packs for")
_NUMPY = ("numpy", "torchao's MX/NVFP4 prototype imports it")


def _float8(name: str, summary: str, class_name: str) -> Preset:
    """float8 e4m3, which needs CUDA compute capability 8.9 (Ada, Hopper) or newer."""
    config_class = f"{_QUANTIZATION}:{class_name}"
    return Preset(
        name, summary, config_class, _KEEP_INDUCTOR, devices=_CUDA, min_cuda_capability=(8, 9), atol=1e-1, rtol=1e-1
    )


def _blackwell(name: str, summary: str, class_name: str, tolerance: float, **options: Any) -> Preset:
    """A torchao MX/NVFP4 prototype: CUDA compute capability 10.0 or newer, and numpy."""
    config_class = f"{_MX_FORMATS}:{class_name}"
    return Preset(
        name,
        summary,
        config_class,
        options,
        devices=_CUDA,
        min_cuda_capability=(10, 0),
        packages=(_NUMPY,),
        atol=tolerance,
        rtol=tolerance,
        prototype=True,
    )


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            "int8wo",
            "int8 weights (per row), activations in the model's dtype",
            f"{_QUANTIZATION}:Int8WeightOnlyConfig",
            _KEEP_INDUCTOR,
        ),
        Preset(
            "int8dq",
            "int8 weights (per row) and int8 activations quantized per token at run time",
            f"{_QUANTIZATION}:Int8DynamicActivationInt8WeightConfig",
            _KEEP_INDUCTOR,
            compiled_on=COMPILED_ON_CPU,
        ),
        _float8("fp8wo", "float8 e4m3 weights (per row)", "Float8WeightOnlyConfig"),
        # torchao's default granularity (per tensor): per-row scaling needs bfloat16 weights.
        _float8(
            "fp8dq",
            "float8 e4m3 weights and activations, scaled per tensor",
            "Float8DynamicActivationFloat8WeightConfig",
        ),
        _blackwell(
            "mxfp8",
            "MX float8 weights and activations (block size 32)",
            "MXDynamicActivationMXWeightConfig",
            1e-1,
            activation_dtype="float8_e4m3fn",
            weight_dtype="float8_e4m3fn",
        ),
        Preset(
            "int4wo",
            "int4 weights in groups of 128",
            f"{_QUANTIZATION}:Int4WeightOnlyConfig",
            {"group_size": 128, **_KEEP_INDUCTOR},
            devices=_CUDA,
            packages=(_MSLK,),
            atol=1e-1,
            rtol=1e-1,
        ),
        _blackwell(
            "nvfp4wo", "NVFP4 weights (block size 16), activations in the model's dtype", "NVFP4WeightOnlyConfig", 2e-1
        ),
        _blackwell(
            "mxfp4",
            "MX float4 weights and activations (block size 32)",
            "MXDynamicActivationMXWeightConfig",
            2.5e-1,
            activation_dtype="float4_e2m1fn_x2",
            weight_dtype="float4_e2m1fn_x2",
        ),
        # The fused triton kernel needs the separate mslk package; the plain path does not.
        _blackwell(
            "nvfp4",
            "NVFP4 weights and activations (block size 16)",
            "NVFP4DynamicActivationNVFP4WeightConfig",
            2.5e-1,
            use_triton_kernel=False,
        ),
    )
}
"""Every preset, from the least lossy to the most: the order default candidates are offered in."""

DEFAULT_PRESET = "int8wo"
"""What ``TorchAOBackend()`` quantizes with: the preset that runs everywhere and loses least."""


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown torchao preset {name!r}; choose one of: {', '.join(PRESETS)}") from None
