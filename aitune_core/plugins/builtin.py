"""The built-in plugin: the eager and partition backends and the Triton target, registered as any plugin's are.

Going through the public hooks keeps them honest: if they cannot express the core's
own backends, they cannot express anyone else's. The partition is registered so that a
checkpoint names it, and loading finds it, as it does every other backend.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aitune_core.backends.base import Backend
from aitune_core.backends.eager import TorchEagerBackend
from aitune_core.deploy.target import DeployTarget
from aitune_core.deploy.triton.target import TritonTarget
from aitune_core.partition.backend import PartitionBackend
from aitune_core.plugins.api import BASELINE_PRIORITY, PLUGIN_API_VERSION, hookimpl
from aitune_core.plugins.records import Candidate

AITUNE_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [TorchEagerBackend, PartitionBackend]


@hookimpl
def aitune_register_targets() -> Sequence[type[DeployTarget]]:
    return [TritonTarget]


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate]:
    """Eager is the baseline every other candidate is measured against, so it comes last."""
    return [Candidate(TorchEagerBackend(), priority=BASELINE_PRIORITY)]
