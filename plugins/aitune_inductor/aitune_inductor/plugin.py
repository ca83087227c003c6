"""The entry point aitune loads (group ``aitune.plugins``): registers both backends and offers them.

Nothing here compiles or imports Inductor; loading the plugin costs the import of the
backend classes only. Availability (a C++ compiler, triton) is judged by the backends'
own ``availability`` when the registry asks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aitune_core.plugin_api import DEFAULT_PRIORITY, PLUGIN_API_VERSION, Backend, Candidate, hookimpl
from aitune_inductor.aot import TorchInductorAotBackend
from aitune_inductor.jit import TorchInductorJitBackend

AITUNE_PLUGIN_API = PLUGIN_API_VERSION

JIT_PRIORITY = DEFAULT_PRIORITY + 20
"""torch.compile first: it handles graph breaks and any Python the model runs."""

AOT_PRIORITY = DEFAULT_PRIORITY + 10
"""Then AOT Inductor: stricter (the model must export), but its package deploys without compiling."""


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [TorchInductorJitBackend, TorchInductorAotBackend]


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate] | None:
    if torch.device(device).type not in ("cpu", "cuda"):
        return None
    return [
        Candidate(TorchInductorJitBackend(), priority=JIT_PRIORITY),
        Candidate(TorchInductorAotBackend(), priority=AOT_PRIORITY),
    ]
