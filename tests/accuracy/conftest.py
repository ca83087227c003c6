from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aitune_core.config import config


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path) -> Iterator[None]:
    config.cache_dir = tmp_path / "cache"
    yield


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    # Timing comparisons in these tests must not depend on how busy the other core is.
    import torch

    torch.set_num_threads(1)
