"""Whether TensorRT can run here, judged without importing it.

``import tensorrt`` loads the CUDA and TensorRT libraries (hundreds of megabytes) and
fails loudly on a machine without them, so listing plugins or choosing default
candidates must not do it. ``importlib.util.find_spec`` says whether the module is
installed without running it; a broken installation is then reported by the build,
with TensorRT's own error.
"""

from __future__ import annotations

import importlib.util

import torch

from aitune_core.plugin_api import Availability

INSTALL_HINT = "pip install 'aitune-trt[tensorrt]', or the tensorrt-cu12/-cu13 wheel matching your CUDA"
EXPORT_MODULES = ("onnx", "onnxscript")
"""What aitune-onnx's exporter needs; onnxruntime is not used by this backend."""


def tensorrt_importable() -> bool:
    return importlib.util.find_spec("tensorrt") is not None


def tensorrt_availability(device: torch.device | str) -> Availability:
    """Every reason TensorRT cannot build and run on ``device`` here, or yes.

    The reasons read "tensorrt not importable (...)" and "no CUDA device", joined by
    "; " when both hold, so that a CPU machine without TensorRT says both at once.
    """
    device = torch.device(device)
    reasons = []
    if not tensorrt_importable():
        reasons.append(f"tensorrt not importable ({INSTALL_HINT})")
    missing = [name for name in EXPORT_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        reasons.append(f"{', '.join(missing)} not importable, needed for the ONNX export; pip install onnx onnxscript")
    if not torch.cuda.is_available():
        reasons.append("no CUDA device")
    elif device.type != "cuda":
        reasons.append(f"TensorRT runs on CUDA devices, not {device.type}")
    return Availability.no("; ".join(reasons)) if reasons else Availability.yes()
