"""Opt-in pytest plugin: every test starts from aitune's defaults, and no failed load changes a model.

A plugin's test suite enables it beside :mod:`aitune_core.testing`, in its root
``conftest.py``::

    pytest_plugins = ["aitune_core.testing", "aitune_core.testing.isolation"]

Its fixtures apply to every test (autouse), so it is not part of ``aitune_core.testing``
itself, which any backend author may enable without giving up their own config:

* each test runs with the default ``aitune_core.config``, a cache folder of its own,
  a :func:`~aitune_core.testing.timing.steady_timer` (which candidate wins never
  depends on the machine's load) and ``torch.manual_seed(0)``, and the config is reset
  after it;
* every ``aitune_core.load`` that fails must leave the model exactly as it was
  (:func:`~aitune_core.testing.load_guard.guard_failed_loads`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from aitune_core.config import config
from aitune_core.testing.load_guard import guard_failed_loads
from aitune_core.testing.timing import steady_timer


@pytest.fixture(autouse=True)
def _aitune_default_config(tmp_path: Path) -> Iterator[None]:
    config.reset()
    config.timer = steady_timer()
    config.cache_dir = tmp_path / "aitune-cache"
    torch.manual_seed(0)
    try:
        yield
    finally:
        config.reset()


@pytest.fixture(autouse=True)
def _aitune_failed_loads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return guard_failed_loads(monkeypatch)
