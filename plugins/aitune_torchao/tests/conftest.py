"""The recorded MLP the plugin's tests quantize; the rest comes from :mod:`aitune_core.testing.isolation`.

The MLP is wider than the shared tiny models, so that torchao's per-row int8 kernels
matter, and recorded afresh for every test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aitune_core.plugin_api import BuildContext
from aitune_core.testing.models import SmallMLP
from aitune_core.testing.recording import record


@pytest.fixture
def mlp_context(tmp_path: Path) -> BuildContext:
    torch.manual_seed(0)
    return record(SmallMLP(), lambda b: ((torch.randn(b, 32),), {}), (2, 4, 8), tmp_path / "mlp")
