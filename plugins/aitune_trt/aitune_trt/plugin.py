"""The entry point aitune loads (group ``aitune.plugins``): registers the backend and offers it.

Loading the plugin imports neither tensorrt nor onnx: availability is judged with
``importlib.util.find_spec`` and ``torch.cuda.is_available()``. The default candidate
is offered on CPUs too, carrying its availability ("tensorrt not importable", "no
CUDA device"), so that the tuning summary says why TensorRT was not tried instead of
leaving it out silently.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aitune_core.plugin_api import DEFAULT_PRIORITY, PLUGIN_API_VERSION, Backend, Candidate, hookimpl
from aitune_trt.backend import TensorRTBackend

AITUNE_PLUGIN_API = PLUGIN_API_VERSION

TRT_PRIORITY = DEFAULT_PRIORITY + 30
"""Tried first on CUDA: a TensorRT engine is usually the fastest of the candidates there, and
a failed export or build costs only its own time before the next candidate is tried."""


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [TensorRTBackend]


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate] | None:
    """float32 TensorRT (it validates against eager at the default tolerances), with its availability."""
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        return None
    backend = TensorRTBackend()
    return [Candidate(backend, priority=TRT_PRIORITY, availability=backend.availability(device))]
