"""A plugin whose only backend needs a library this machine does not have."""

from __future__ import annotations

import torch

from aitune_core import hookimpl
from aitune_core.backends import Availability, Backend, TorchEagerBackend
from aitune_core.plugins import Candidate

AITUNE_PLUGIN_API = 1


class NeedsFakelibBackend(TorchEagerBackend):
    name = "fake_needs_fakelib"

    @classmethod
    def availability(cls, device: torch.device | str) -> Availability:
        return Availability.no("fakelib not importable")


@hookimpl
def aitune_register_backends() -> list[type[Backend]]:
    return [NeedsFakelibBackend]


@hookimpl
def aitune_default_candidates(device: torch.device) -> list[Candidate]:
    return [Candidate(NeedsFakelibBackend(), priority=50)]
