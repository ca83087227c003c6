"""pytest fixtures for plugin authors: fake distributions, an isolated registry, a clean environment, one thread.

Each undoes everything when the test ends: ``sys.path`` entries, the modules imported
from the fake distributions, the process-wide plugin registry, the environment, torch's
thread count.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aitune_core.plugins import manager
from aitune_core.plugins.loader import Selection, builtin_source, discover
from aitune_core.plugins.registry import PluginRegistry
from aitune_core.testing.fake_dists import FakeDist, write_fake_dist


def forget_modules(folders: list[Path]) -> None:
    """Drop modules imported from ``folders``, so the next test imports them afresh."""
    roots = [folder.resolve() for folder in folders]
    for name, module in list(sys.modules.items()):
        location = getattr(module, "__file__", None)
        if location and any(Path(location).resolve().is_relative_to(root) for root in roots):
            del sys.modules[name]


class IsolatedPlugins:
    """Loads registries from chosen distributions only and installs them process-wide.

    ``load(*dists)`` discovers plugins in the given :class:`FakeDist` objects or folders
    (nothing else that is installed), adds the built-in plugin, and makes the result the
    registry that ``aitune_core`` uses until the test ends. ``strict`` and ``selection``
    default to the environment (``AITUNE_STRICT_PLUGINS``, ``AITUNE_PLUGINS``,
    ``AITUNE_DISABLED_PLUGINS``), so ``monkeypatch.setenv`` works as it would for users.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.folders: list[Path] = []

    def load(
        self,
        *dists: FakeDist | Path | str,
        strict: bool | None = None,
        selection: Selection | None = None,
    ) -> PluginRegistry:
        folders = [dist.path if isinstance(dist, FakeDist) else Path(dist) for dist in dists]
        for folder in folders:
            if folder not in self.folders:
                self.folders.append(folder)
                self._monkeypatch.syspath_prepend(str(folder))
        sources = [builtin_source(), *discover(folders)] if folders else [builtin_source()]
        registry = PluginRegistry.load(sources, strict=strict, selection=selection)
        manager.install_registry(registry)
        return registry


@pytest.fixture
def aitune_isolated_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[IsolatedPlugins]:
    """A plugin registry that sees only the distributions a test gives it.

    ```python
    def test_my_plugin_loads(aitune_fake_dist, aitune_isolated_plugins):
        dist = aitune_fake_dist("my-plugin", source=PLUGIN_SOURCE)
        registry = aitune_isolated_plugins.load(dist)
        assert aitune_core.plugins.get_backend_class("my_backend")
    ```
    """
    previous = manager.install_registry(None)
    isolated = IsolatedPlugins(monkeypatch)
    try:
        manager.install_registry(PluginRegistry.load([builtin_source()], strict=False, selection=Selection()))
        yield isolated
    finally:
        manager.install_registry(previous)
        forget_modules(isolated.folders)


@pytest.fixture
def aitune_fake_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeDist]]:
    """Write a fake installed distribution and put it on ``sys.path``.

    Takes the arguments of :func:`aitune_core.testing.fake_dists.write_fake_dist` after
    ``root``: ``aitune_fake_dist("my-plugin", source="...", version="1.0")``.
    """
    written: list[FakeDist] = []

    def write(distribution: str, source: str | None = None, **options: Any) -> FakeDist:
        dist = write_fake_dist(tmp_path / "aitune-fake-dists", distribution, source, **options)
        monkeypatch.syspath_prepend(str(dist.path))
        written.append(dist)
        return dist

    yield write
    forget_modules([dist.path for dist in written])


PLUGIN_ENV = ("AITUNE_PLUGINS", "AITUNE_DISABLED_PLUGINS", "AITUNE_STRICT_PLUGINS")
"""The environment variables that choose which plugins load, and whether their faults raise."""


@pytest.fixture
def aitune_clean_plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test runs without the :data:`PLUGIN_ENV` variables, whatever the shell that started pytest set."""
    for name in PLUGIN_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def aitune_one_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torch runs on one thread during the test, and so does every child it starts (``OMP_NUM_THREADS=1``).

    For tests that time real runs: the comparison then does not depend on how busy the
    machine's other cores are. The thread count the test found is back afterwards.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        yield
    finally:
        torch.set_num_threads(threads)
