"""aitune plugin module: the object the ``aitune.plugins`` entry point names.

aitune imports it on first use of its plugin registry, checks ``AITUNE_PLUGIN_API``
and collects the functions marked with ``hookimpl``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aitune_core.plugin_api import DEFAULT_PRIORITY, Backend, Candidate, hookimpl
from aitune_example_backend.backend import FxFuseBackend, FxFuseConfig

AITUNE_PLUGIN_API = 1

__all__ = ["AITUNE_PLUGIN_API", "FxFuseBackend", "FxFuseConfig"]


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [FxFuseBackend]


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate]:
    return [Candidate(FxFuseBackend(), priority=DEFAULT_PRIORITY)]
