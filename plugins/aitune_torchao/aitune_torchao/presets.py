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

Nothing here imports torchao: the config factories import it when they are called.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from typing import Any

import attrs
import torch

from aitune_core.plugin_api import Availability


def _int8wo() -> Any:
    from torchao.quantization import Int8WeightOnlyConfig

    return Int8WeightOnlyConfig(set_inductor_config=False)


def _int8dq() -> Any:
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig

    return Int8DynamicActivationInt8WeightConfig(set_inductor_config=False)


def _int4wo() -> Any:
    from torchao.quantization import Int4WeightOnlyConfig

    return Int4WeightOnlyConfig(group_size=128, set_inductor_config=False)


def _fp8wo() -> Any:
    from torchao.quantization import Float8WeightOnlyConfig

    return Float8WeightOnlyConfig(set_inductor_config=False)


def _fp8dq() -> Any:
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig

    # torchao's default granularity (per tensor): per-row scaling needs bfloat16 weights.
    return Float8DynamicActivationFloat8WeightConfig(set_inductor_config=False)


def _mxfp8() -> Any:
    from torchao.prototype.mx_formats import MXDynamicActivationMXWeightConfig

    return MXDynamicActivationMXWeightConfig(activation_dtype=torch.float8_e4m3fn, weight_dtype=torch.float8_e4m3fn)


def _mxfp4() -> Any:
    from torchao.prototype.mx_formats import MXDynamicActivationMXWeightConfig

    dtype = torch.float4_e2m1fn_x2
    return MXDynamicActivationMXWeightConfig(activation_dtype=dtype, weight_dtype=dtype)


def _nvfp4() -> Any:
    from torchao.prototype.mx_formats import NVFP4DynamicActivationNVFP4WeightConfig

    # The fused triton kernel needs the separate mslk package; the plain path does not.
    return NVFP4DynamicActivationNVFP4WeightConfig(use_triton_kernel=False)


def _nvfp4wo() -> Any:
    from torchao.prototype.mx_formats import NVFP4WeightOnlyConfig

    return NVFP4WeightOnlyConfig()


@attrs.frozen
class Preset:
    """One recipe.

    config_class: the torchao class ``make`` builds, as ``module:Name`` (shown to users,
        and checked for when ``prototype`` is set, since prototypes come and go).
    devices: the device types it runs on; ``min_cuda_capability`` narrows CUDA further.
    packages: importable modules it needs beyond torchao, with why.
    atol, rtol: the starting tolerances against eager; quantization changes numerics
        on purpose, so fp32 defaults would reject every candidate.
    """

    name: str
    summary: str
    config_class: str
    make: Callable[[], Any] = attrs.field(repr=False)
    devices: tuple[str, ...] = ("cpu", "cuda")
    min_cuda_capability: tuple[int, int] | None = None
    packages: tuple[tuple[str, str], ...] = ()
    atol: float = 5e-2
    rtol: float = 5e-2
    prototype: bool = False

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
    module, _, name = preset.config_class.partition(":")
    try:
        found = hasattr(importlib.import_module(module), name)
    except ImportError as error:
        return Availability.no(f"preset {preset.name!r}: cannot import {module} ({error})")
    if not found:
        version = importlib.metadata.version("torchao")
        return Availability.no(f"preset {preset.name!r}: the installed torchao {version} has no {name}")
    return Availability.yes()


_MSLK = ("mslk", "the CUDA int4 kernels torchao's Int4WeightOnlyConfig packs for")
_NUMPY = ("numpy", "torchao's MX/NVFP4 prototype imports it")

PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            "int8wo",
            "int8 weights (per row), activations in the model's dtype",
            "torchao.quantization:Int8WeightOnlyConfig",
            _int8wo,
        ),
        Preset(
            "int8dq",
            "int8 weights (per row) and int8 activations quantized per token at run time",
            "torchao.quantization:Int8DynamicActivationInt8WeightConfig",
            _int8dq,
        ),
        Preset(
            "fp8wo",
            "float8 e4m3 weights (per row)",
            "torchao.quantization:Float8WeightOnlyConfig",
            _fp8wo,
            devices=("cuda",),
            min_cuda_capability=(8, 9),
            atol=1e-1,
            rtol=1e-1,
        ),
        Preset(
            "fp8dq",
            "float8 e4m3 weights and activations, scaled per tensor",
            "torchao.quantization:Float8DynamicActivationFloat8WeightConfig",
            _fp8dq,
            devices=("cuda",),
            min_cuda_capability=(8, 9),
            atol=1e-1,
            rtol=1e-1,
        ),
        Preset(
            "mxfp8",
            "MX float8 weights and activations (block size 32)",
            "torchao.prototype.mx_formats:MXDynamicActivationMXWeightConfig",
            _mxfp8,
            devices=("cuda",),
            min_cuda_capability=(10, 0),
            atol=1e-1,
            rtol=1e-1,
            packages=(_NUMPY,),
            prototype=True,
        ),
        Preset(
            "int4wo",
            "int4 weights in groups of 128",
            "torchao.quantization:Int4WeightOnlyConfig",
            _int4wo,
            devices=("cuda",),
            packages=(_MSLK,),
            atol=1e-1,
            rtol=1e-1,
        ),
        Preset(
            "nvfp4wo",
            "NVFP4 weights (block size 16), activations in the model's dtype",
            "torchao.prototype.mx_formats:NVFP4WeightOnlyConfig",
            _nvfp4wo,
            devices=("cuda",),
            min_cuda_capability=(10, 0),
            atol=2e-1,
            rtol=2e-1,
            packages=(_NUMPY,),
            prototype=True,
        ),
        Preset(
            "mxfp4",
            "MX float4 weights and activations (block size 32)",
            "torchao.prototype.mx_formats:MXDynamicActivationMXWeightConfig",
            _mxfp4,
            devices=("cuda",),
            min_cuda_capability=(10, 0),
            atol=2.5e-1,
            rtol=2.5e-1,
            packages=(_NUMPY,),
            prototype=True,
        ),
        Preset(
            "nvfp4",
            "NVFP4 weights and activations (block size 16)",
            "torchao.prototype.mx_formats:NVFP4DynamicActivationNVFP4WeightConfig",
            _nvfp4,
            devices=("cuda",),
            min_cuda_capability=(10, 0),
            atol=2.5e-1,
            rtol=2.5e-1,
            packages=(_NUMPY,),
            prototype=True,
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
