"""Candidates a strategy tries when it is given no backends: what the installed plugins offer.

A plugin's default candidates are tried without the user naming them, so those that
change the numbers on purpose (``Backend.lossy``) are offered only to users who opted
in; otherwise they are listed as skipped, with how to opt in, like unavailable ones.
"""

from __future__ import annotations

import torch

from aitune_core.backends.base import Availability, Backend
from aitune_core.config import config
from aitune_core.extensions import slots

LOSSY_REASON = "lossy (changes numbers on purpose); set ait.config.allow_lossy = True or name it to try it"
"""Why a lossy default candidate was skipped; the plan, the log and the summary show it."""


def default_backends(device: torch.device, allow_lossy: bool | None = None) -> list[tuple[Backend, Availability]]:
    """Blueprints the plugins propose for ``device``, best first, with their availability.

    Unavailable ones are included so that strategies can report why they were skipped.
    Lossy ones count as unavailable unless ``allow_lossy`` (None: ``config.allow_lossy``);
    a candidate that cannot run here keeps that reason, since opting in would not help.
    """
    allowed = config.allow_lossy if allow_lossy is None else allow_lossy
    offered = []
    for candidate in slots().default_candidates(torch.device(device)):
        availability = candidate.availability or candidate.backend.availability(device)
        if availability.available and not allowed and candidate.backend.lossy:
            availability = Availability.no(LOSSY_REASON)
        offered.append((candidate.backend, availability))
    return offered


def skipped_as_lossy(availability: Availability) -> bool:
    """Whether :func:`default_backends` held this candidate back for being lossy."""
    return not availability.available and availability.reason == LOSSY_REASON
