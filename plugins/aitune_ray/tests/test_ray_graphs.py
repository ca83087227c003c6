"""Graphs in parallel on a 4-CPU local Ray: a model with four wrapped modules, all built at once.

Each module's candidate waits in its build until four builds have started (a folder
the Ray workers share): on Ray every one of them passes, so the four modules' builds
ran at the same time. The summary and the checkpoint are then those of the same
model tuned in this process, one build after another, except for the timings and
which worker ran each candidate. Timings are scripted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ray_backends import FAST_PROFILE, MEETING_COUNT, MEETING_DIR, FourBranches, MeetingBackend, SlowDemoMLP
from ray_setup import worker_env

import aitune_core as ait
from aitune_core import TorchEagerBackend, TuneReport
from aitune_core.testing.engine import mlp_samples
from aitune_ray import RayExecutor

pytestmark = pytest.mark.slow
MODULES = 4


@pytest.fixture(scope="module")
def four_worker_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from aitune_ray.executor import local_temp_dir

    meeting = tmp_path_factory.mktemp("meeting")
    meet = {MEETING_DIR: str(meeting), MEETING_COUNT: str(MODULES)}
    env = worker_env(tmp_path_factory.mktemp("workers-cache"), **meet)
    ray.init(
        num_cpus=MODULES,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": env},
        **local_temp_dir(),
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def _model(name: Callable[[str], str]) -> tuple[FourBranches, list[ait.Module]]:
    torch.manual_seed(0)
    wrapped = [ait.Module(SlowDemoMLP().eval(), name(f"branch{i}")) for i in range(MODULES)]
    return FourBranches(wrapped).eval(), wrapped


def _tune(model: FourBranches, executor: Any) -> TuneReport:
    strategy = ait.MaxThroughputStrategy([TorchEagerBackend(), MeetingBackend()], profile=FAST_PROFILE)
    return ait.tune(model, mlp_samples(4), batch_sizes=[1, 2], strategy=strategy, executor=executor)


def _summary(report: TuneReport) -> list[Any]:
    return [
        (g.graph, g.strategy, [(c.backend, c.status, c.stage, c.reason, c.describe_serves()) for c in g.candidates])
        for g in report.graphs
    ]


def _checkpoint(model: FourBranches, folder: Path) -> dict[str, Any]:
    """The manifest without what differs between any two runs: when it was written and the modules' names."""
    manifest = json.loads((ait.save(model, folder) / "manifest.json").read_text())
    manifest.pop("created")
    for module in manifest["modules"]:
        module.pop("name")
    return manifest


def test_four_modules_build_at_once_and_report_as_one_after_another(
    four_worker_ray: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    sequential_model, _ = _model(unique_name)
    sequential = _tune(sequential_model, "inprocess")
    assert os.environ.get(MEETING_DIR) is None  # so in this process each build went on at once

    parallel_model, wrapped = _model(unique_name)
    parallel = _tune(parallel_model, RayExecutor(timeout_s=300))

    assert [g.module for g in parallel.graphs] == [w.name for w in wrapped]  # merged in the modules' order
    meetings = [c for g in parallel.graphs for c in g.candidates if c.backend == "MeetingBackend()"]
    assert len(meetings) == MODULES and all(c.status == "selected" for c in meetings), [c.reason for c in meetings]
    assert len({c.worker for c in meetings}) == MODULES  # four workers, each building one module's candidate
    assert _summary(parallel) == _summary(sequential)
    assert _checkpoint(parallel_model, tmp_path / "parallel") == _checkpoint(sequential_model, tmp_path / "sequential")
