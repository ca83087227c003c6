"""One local Ray for the whole module (starting Ray takes seconds), and a clean aitune config per test.

The Ray gets two CPUs and this process's ``sys.path`` as its workers' ``PYTHONPATH``,
so that they import ``ray_backends`` (this folder) and the same aitune as the driver.
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

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # ray_backends, for the driver (importlib mode adds no test folders)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    paths = os.pathsep.join(dict.fromkeys(entry or os.getcwd() for entry in sys.path))
    from aitune_ray.executor import local_temp_dir

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": paths, "OMP_NUM_THREADS": "1"}},
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
