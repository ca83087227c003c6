"""Opt-in pytest plugin: every test starts from aitune's defaults, and no failed load changes a model.

A plugin's test suite enables it beside :mod:`aitune_core.testing`, in its root
``conftest.py``::

    pytest_plugins = ["aitune_core.testing", "aitune_core.testing.isolation"]

Its fixtures apply to every test (autouse), so it is not part of ``aitune_core.testing``
itself, which any backend author may enable without giving up their own config:

* each test runs with the default ``aitune_core.config``, a cache folder of its own,
  a :func:`~aitune_core.testing.timing.steady_timer` (which candidate wins never
  depends on the machine's load), one build at a time in the test's process
  (``parallel_builds = 1``) and ``torch.manual_seed(0)``, and the config is reset
  after it;
* every ``aitune_core.load`` that fails must leave the model exactly as it was
  (:func:`~aitune_core.testing.load_guard.guard_failed_loads`).

It also offers ``unique_name``, for module names no other test uses: a name is taken
while its wrapper lives, and a failing test's traceback can keep wrappers alive. A
conftest that keeps its own config fixtures can import just that fixture.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
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
    config.parallel_builds = 1  # one build at a time, in this process, unless a test asks for more
    config.cache_dir = tmp_path / "aitune-cache"
    torch.manual_seed(0)
    try:
        yield
    finally:
        config.reset()


@pytest.fixture(autouse=True)
def _aitune_failed_loads_change_nothing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return guard_failed_loads(monkeypatch)


_names = itertools.count()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[..., str]:
    """``unique_name("encoder")`` gives a module name no other test uses."""

    def make(stem: str = "module") -> str:
        return f"{request.node.name}:{stem}:{next(_names)}"

    return make
