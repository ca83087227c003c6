"""``ait.serving_plan``: what serving a checkpoint in Python needs, read from its manifest alone.

A server that batches requests and places replicas sizes itself from it (aitune-ray's
``aitune serve``): the largest batch tuning built for, the threads it was timed at, the
device. ``aitune serve`` itself comes with aitune-ray; without it the command says what
to install.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.cli import main
from aitune_core.profiling import ProfileConfig

FAST = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.001, max_time_s=0.01, max_batch_search=False)


def tuned_checkpoint(tmp_path: Path, name: str, sizes: list[int]) -> Path:
    module = ait.Module(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval(), name)
    strategy = ait.OneBackendStrategy(ait.TorchEagerBackend(), profile=FAST)
    ait.tune(module, [torch.randn(8) for _ in range(4)], batch_sizes=sizes, strategy=strategy, threads=1)
    ait.save(module, tmp_path / "ckpt")
    return tmp_path / "ckpt"


def test_the_plan_holds_the_tuned_batch_range_threads_and_device(
    tmp_path: Path, unique_name: Callable[..., str]
) -> None:
    name = unique_name("served")
    plan = ait.serving_plan(tuned_checkpoint(tmp_path, name, [2, 4, 16]))
    assert plan.max_batch == 16  # the largest batch tuning built and validated for
    assert plan.threads == 1
    assert (plan.devices, plan.needs_gpu, plan.native_code) == (("cpu",), False, False)
    (graph,) = plan.graphs
    assert (graph.module, graph.min_batch, graph.max_batch, graph.batch_first) == (name, 2, 16, True)
    assert graph.backends == ("batch 2-16: TorchEagerBackend()",)
    assert "batches up to 16, 1 thread(s)" in plan.describe()


def test_a_plan_without_batched_graphs_serves_one_request_at_a_time() -> None:
    graph = ait.ServedGraph("m", "0", "cuda", None, None, True, ("every call: eager",))
    plan = ait.ServingPlan("ckpt", (graph,), None, False)
    assert plan.max_batch is None and plan.needs_gpu
    assert "no batching" in plan.describe() and "torch's default threads" in plan.describe()


def test_an_altered_checkpoint_is_refused(tmp_path: Path, unique_name: Callable[..., str]) -> None:
    checkpoint = tuned_checkpoint(tmp_path, unique_name("altered"), [1, 4])
    weights = next(path for path in sorted(checkpoint.rglob("weights*")) if path.is_file())
    altered = bytearray(weights.read_bytes())
    altered[len(altered) // 2] ^= 0xFF
    weights.write_bytes(bytes(altered))
    with pytest.raises(ait.CheckpointError, match="sha256"):
        ait.serving_plan(checkpoint)


def test_serve_without_aitune_ray_names_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "aitune_ray", None)  # as where it is not installed: importing it fails
    assert main(["serve", "ckpt", "--factory", "mypkg.models:build"]) == 1
    error = capsys.readouterr().err
    assert "needs the aitune-ray distribution" in error and "pip install 'aitune-ray[serve]'" in error
