"""One local Ray for the whole module (starting Ray takes seconds), and a clean aitune config per test.

The Ray gets two CPUs and this process's ``sys.path`` as its workers' ``PYTHONPATH``,
so that they import ``ray_backends`` (this folder) and the same aitune as the driver,
and a cache folder of their own (``AITUNE_CACHE_DIR``): workers never write into the
driver's (each test's ``config.cache_dir``).

Every Ray these tests start, of one node or several, talks over loopback only: Ray's
local-only mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read when ``ray`` is first
imported) takes this machine's address to be 127.0.0.1 rather than its network address.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from aitune_core.plugin_api import config
from aitune_core.testing.isolation import unique_name  # noqa: F401  (the fixture, not its autouse siblings)
from aitune_core.testing.timing import steady_timer

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before anything imports ray: loopback only

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # ray_backends, for the driver (importlib mode adds no test folders)

from fake_ray import FakeRay  # noqa: E402  (found through the path above)
from ray_setup import worker_env  # noqa: E402


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> FakeRay:
    """A stand-in for ``ray`` (:mod:`fake_ray`), for tests of the executor that need no Ray."""
    ray = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    return ray


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from aitune_ray.executor import local_temp_dir

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": worker_env(tmp_path_factory.mktemp("workers-cache"))},
        **local_temp_dir(),
    )
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(autouse=True)
def _clean_config(tmp_path: Path) -> Iterator[None]:
    config.reset()
    config.timer = steady_timer()  # which candidate wins never depends on the machine's load
    config.cache_dir = tmp_path / "aitune-cache"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # timings here must not depend on how busy the other core is
    torch.manual_seed(0)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        config.reset()
