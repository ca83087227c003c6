"""Default candidates when a strategy is given no backends: what the installed plugins offer."""

from __future__ import annotations

import torch

from aitune_core.backends.base import Backend


def default_backends(device: torch.device) -> list[Backend]:
    """Blueprints the plugins offer for ``device``, best first; eager is always among them."""
    from aitune_core.backends.eager import TorchEagerBackend

    return [TorchEagerBackend()]
