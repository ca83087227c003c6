"""The entry point aitune loads (group ``aitune.plugins``): registers the backend and offers it.

Loading the plugin imports neither onnx nor onnxruntime; the CPU candidate's
availability is judged by whether they are installed, and only a CUDA candidate
imports onnxruntime, to ask which execution providers its build has.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aitune_core.plugin_api import DEFAULT_PRIORITY, PLUGIN_API_VERSION, Backend, Candidate, hookimpl
from aitune_onnx.backend import ONNXRuntimeBackend
from aitune_onnx.session import provider_availability

AITUNE_PLUGIN_API = PLUGIN_API_VERSION

ORT_PRIORITY = DEFAULT_PRIORITY
"""ONNX Runtime is tried after compilers that keep the model in PyTorch (Inductor, +10/+20):
an export is stricter than tracing, and a session holds its own copy of the weights."""


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [ONNXRuntimeBackend]


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate] | None:
    """The CPU provider on CPUs; on CUDA devices the CUDA provider, listed unavailable (with
    the reason) when this onnxruntime build or machine lacks it."""
    device = torch.device(device)
    if device.type == "cpu":
        provider = "cpu"
    elif device.type == "cuda":
        provider = "cuda"
    else:
        return None
    # TF32 off: the default candidate computes float32 as eager does, so it stays lossless.
    options = {"use_tf32": "0"} if provider == "cuda" else None
    backend = ONNXRuntimeBackend(provider=provider, provider_options=options)
    return [Candidate(backend, priority=ORT_PRIORITY, availability=provider_availability(provider, device))]
