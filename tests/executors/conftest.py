from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aitune_core.config import config


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path) -> Iterator[None]:
    config.cache_dir = tmp_path / "cache"
    yield


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Timing comparisons must not depend on how busy the other core is: one torch thread
    # here, and in every child (which reads OMP_NUM_THREADS when it imports torch).
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(threads)
