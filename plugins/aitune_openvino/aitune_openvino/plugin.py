"""The module the ``aitune.plugins`` entry point names: registers the backend and offers it on CPUs.

aitune imports it the first time something needs its plugin registry, whether or not
this backend is ever used, so it imports neither OpenVINO nor anything that does:
availability only looks for the ``openvino`` package.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aitune_core.plugin_api import DEFAULT_PRIORITY, PLUGIN_API_VERSION, Backend, Candidate, hookimpl
from aitune_openvino.availability import openvino_availability, precision_availability
from aitune_openvino.backend import OpenVINOBackend

AITUNE_PLUGIN_API = PLUGIN_API_VERSION
"""The plugin API this module is written against; aitune-core refuses versions it does not support."""

PRIORITY = DEFAULT_PRIORITY + 5
"""Between ONNX Runtime (100) and AOT Inductor (110), a value no shipped plugin uses.

Like AOT Inductor it converts the graph's ``torch.export`` program and deploys without
compiling again; like ONNX Runtime it runs in a runtime of its own that holds its own
copy of the weights. The default candidate is lossless (f32 pinned), so it competes
with the shipped compilers rather than coming after them.
"""


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [OpenVINOBackend]


BF16_PRIORITY = DEFAULT_PRIORITY - 9
"""bf16 inference is lossy: after every lossless candidate, and before torchao's quantization
presets (90 and below), which depart further from eager."""


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate] | None:
    """On CPUs: the lossless default config, and bf16 inference (lossy, so tried only when the
    user opts in; unavailable where the CPU does not compute bf16 natively). Each is listed
    unavailable, with the reason, without openvino; None on other devices."""
    device = torch.device(device)
    if device.type not in OpenVINOBackend.supported_devices:
        return None
    available = openvino_availability(device)
    bf16 = available if not available.available else precision_availability("bf16")
    return [
        Candidate(OpenVINOBackend(), priority=PRIORITY, availability=available),
        Candidate(OpenVINOBackend(inference_precision="bf16"), priority=BF16_PRIORITY, availability=bf16),
    ]
