"""Candidates a strategy tries when it is given no backends: what the installed plugins offer."""

from __future__ import annotations

import torch

from aitune_core.backends.base import Availability, Backend


def default_backends(device: torch.device) -> list[tuple[Backend, Availability]]:
    """Blueprints the plugins propose for ``device``, best first, with their availability.

    Unavailable ones are included so that strategies can report why they were skipped.
    """
    from aitune_core.plugins import default_candidates

    return [
        (candidate.backend, candidate.availability or candidate.backend.availability(device))
        for candidate in default_candidates(device)
    ]
