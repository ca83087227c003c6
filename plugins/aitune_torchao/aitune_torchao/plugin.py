"""The entry point aitune loads (group ``aitune.plugins``): registers the backend, offers one candidate per preset.

Loading the plugin does not import torchao (its import takes seconds and loads native
kernels); only building or loading a backend does. The plugin's own status in
``aitune plugins`` says whether torchao can run on the device at all. Per-preset
detail ("fp8dq needs CUDA with compute capability >= 8.9") does not fit in that one
reason, so each preset is its own default candidate and carries its availability;
``aitune plugins --candidates`` lists them.

Every preset is lossy (``TorchAOBackend.lossy``), so strategies left to the defaults try
them only when the user opts in (``ait.config.allow_lossy = True``, or tolerances given
to the strategy); otherwise they are listed as skipped with that reason.

A preset is offered under ``torch.compile`` on the devices where compiling is what makes
it pay (``Preset.compiled_on``: ``int8dq`` on the CPU). Its compiles go through Inductor's
caches like every other compiling backend's, so a graph compiled once is reused.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aitune_core.plugin_api import DEFAULT_PRIORITY, PLUGIN_API_VERSION, Backend, Candidate, hookimpl
from aitune_torchao.backend import TorchAOBackend
from aitune_torchao.presets import PRESETS

AITUNE_PLUGIN_API = PLUGIN_API_VERSION

FIRST_PRIORITY = DEFAULT_PRIORITY - 10
"""Quantization changes the numerics on purpose, so its candidates come after the lossless
compilers (Inductor at +10/+20, ONNX Runtime at +0); among them, the least lossy first."""


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [TorchAOBackend]


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate] | None:
    """Every preset, least lossy first, each with its availability on ``device`` (and why not)."""
    device = torch.device(device)
    if device.type not in TorchAOBackend.supported_devices:
        return None
    candidates = []
    for rank, (name, preset) in enumerate(PRESETS.items()):
        backend = TorchAOBackend(preset=name, compile=device.type in preset.compiled_on)
        candidates.append(Candidate(backend, priority=FIRST_PRIORITY - rank, availability=backend.availability(device)))
    return candidates
