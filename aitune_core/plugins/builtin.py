"""The built-in plugin: the eager backend, registered through the same hooks as any plugin.

Going through the public hooks keeps them honest: if they cannot express the core's
own backend, they cannot express anyone else's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aitune_core.backends.base import Backend
from aitune_core.backends.eager import TorchEagerBackend
from aitune_core.plugins.api import BASELINE_PRIORITY, PLUGIN_API_VERSION, hookimpl
from aitune_core.plugins.records import Candidate

AITUNE_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [TorchEagerBackend]


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate]:
    """Eager is the baseline every other candidate is measured against, so it comes last."""
    return [Candidate(TorchEagerBackend(), priority=BASELINE_PRIORITY)]
