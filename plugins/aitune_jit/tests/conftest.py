from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import aitune_core as ait
from aitune_core.config import config


@pytest.fixture(autouse=True)
def _jit_off_after(tmp_path: Path) -> Iterator[None]:
    config.cache_dir = tmp_path / "cache"
    try:
        yield
    finally:
        ait.jit.disable()
