"""Fixtures shared by the core tests.

Every test starts and ends with the default ``aitune_core.config``, and gets unique
module names: names are unique per process while a wrapper is alive, and a failing
test's traceback can keep its wrappers alive.
"""

from __future__ import annotations

import gc
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("aitune_core") is None:
    # Running from a checkout without installing: import the package from the source tree.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from aitune_core.backends.build_folders import BUILDS
from aitune_core.config import config
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.testing.isolation import unique_name  # noqa: F401  (the fixture, not its autouse siblings)
from aitune_core.testing.timing import steady_timer

_cache_dirs: set[Path] = set()
"""Every cache folder a test tuned in: the session's end checks that no build folder is left in any."""


@pytest.fixture(autouse=True)
def _default_config(tmp_path: Path) -> Iterator[None]:
    config.reset()
    config.cache_dir = tmp_path / "aitune-cache"  # builds and the artifact store: never shared between tests
    config.timer = steady_timer()  # which candidate wins never depends on the machine's load
    config.parallel_builds = 1  # in this process, one build at a time, unless a test asks for more
    torch.manual_seed(0)
    try:
        yield
    finally:
        _cache_dirs.add(config.cache_dir.expanduser().absolute())  # the test may have moved it
        config.reset()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a passing session that leaves a build folder behind: a tune's folders go with what serves from them.

    Tuned modules the tests dropped are collected first; what is left then was never let go.
    """
    gc.collect()
    left = sorted(folder for root in _cache_dirs for folder in (root / BUILDS).glob("*/*"))
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} build folder(s) left behind in the tests' cache folders:", *map(str, left[:20])]
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    if exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def at_batch() -> Callable[..., Any]:
    """``at_batch(module, 4, x)`` calls ``module(x)`` with the batch size 4 set in the global context."""

    def call(fn: Callable[..., Any], batch_size: int | None, *args: Any, **kwargs: Any) -> Any:
        with global_context:
            global_context.set(BATCH_SIZE_KEY, batch_size)
            return fn(*args, **kwargs)

    return call
