"""Fixtures of the plugin's tests beside the shared ones: one Inductor cache for the run, and a two-input graph.

Compiling costs seconds on a small CPU, so the tests share one Inductor cache (a
kernel compiled by one test is reused by the next) and build each backend once per
module where they can. The recorded MLP and the clean config per test come from
:mod:`aitune_core.testing.recorded` and :mod:`aitune_core.testing.isolation`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import BuildContext
from aitune_core.testing.models import Call
from aitune_core.testing.recording import record


@pytest.fixture(scope="session", autouse=True)
def _shared_inductor_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One Inductor cache for the whole run, unless the caller already chose one (nox does)."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        yield
        return
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor-cache"))
    try:
        yield
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)


class TwoInputs(torch.nn.Module):
    """Two inputs whose batch axes differ (``y`` holds two rows per sample), nested outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        hidden = torch.relu(self.proj(x))
        pairs = y.view(x.shape[0], 2, -1).sum(dim=1)
        return {"hidden": hidden, "extra": (pairs * 2, hidden.mean())}


def _two_inputs_call(batch: int) -> Call:
    return (torch.randn(batch, 8), torch.randn(2 * batch, 3)), {}


@pytest.fixture(scope="module")
def two_inputs_context(tmp_path_factory: pytest.TempPathFactory) -> BuildContext:
    torch.manual_seed(0)
    return record(TwoInputs(), _two_inputs_call, (2, 4, 8), tmp_path_factory.mktemp("two"))
