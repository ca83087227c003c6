"""Whether OpenVINO can run here, and whether this CPU computes a reduced precision natively.

Both are answered without importing OpenVINO: the plugin registry asks whenever
plugins are listed, and importing OpenVINO costs a second or more. The package is
looked for, and the CPU's instruction sets are read from ``/proc/cpuinfo``, which is
what OpenVINO's CPU plugin decides by too: where the CPU lacks bf16 (AVX512-BF16 or
AMX) or f16 (AVX512-FP16 or AMX-FP16), a reduced precision is computed in f32, slower
than f32 asked for directly and no more exact.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

from aitune_core.plugin_api import Availability

CPU_FLAGS = {"bf16": ("avx512_bf16", "amx_bf16"), "f16": ("avx512_fp16", "amx_fp16")}
"""The ``/proc/cpuinfo`` flags, any of which makes the CPU plugin compute that precision natively."""
CPUINFO = Path("/proc/cpuinfo")


def openvino_availability(device: torch.device | str) -> Availability:
    device = torch.device(device)
    if device.type != "cpu":
        return Availability.no(f"the OpenVINO backend runs on cpu, not {device.type}")
    if importlib.util.find_spec("openvino") is None:
        return Availability.no("openvino is not installed (pip install openvino)")
    return Availability.yes()


def precision_availability(precision: str, cpuinfo: Path = CPUINFO) -> Availability:
    """Whether this CPU computes ``precision`` (``"bf16"``, ``"f16"``) natively; f32 always."""
    flags = CPU_FLAGS.get(precision)
    if flags is None:
        return Availability.yes()
    found = _cpu_flags(cpuinfo)
    if found is None:
        return Availability.no(f"cannot tell whether this CPU computes {precision} ({cpuinfo} is not readable)")
    if not found.intersection(flags):
        return Availability.no(f"this CPU has none of {', '.join(flags)}: OpenVINO would compute {precision} in f32")
    return Availability.yes()


@functools.cache
def _cpu_flags(cpuinfo: Path) -> frozenset[str] | None:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()
