"""A winner built in a worker is held to what the worker validated: its files, by sha256, up to ``save``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from executor_backends import FAST_PROFILE, ArtifactBackend, SlowableMLP

import aitune_core as ait
from aitune_core.backends.artifacts import ArtifactSeal, seal_of
from aitune_core.errors import CheckpointError
from aitune_core.executors import ExecutorError
from aitune_core.executors.isolated.remote import seal_restored
from aitune_core.strategies import FirstWinsStrategy
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins

_PLUGIN = """
from aitune_core import hookimpl
from executor_backends import ArtifactBackend

AITUNE_PLUGIN_API = 1


@hookimpl
def aitune_register_backends():
    return [ArtifactBackend]
"""


def test_a_subprocess_winner_keeps_its_workers_seal_and_save_checks_it(
    unique_name: Callable[..., str], tmp_path: Path, aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-executor-seal-tests", _PLUGIN))
    name = unique_name()
    module = ait.Module(SlowableMLP(0.005).eval(), name)
    strategy = FirstWinsStrategy([ArtifactBackend()], profile=FAST_PROFILE).enable_performance_validation(False)
    ait.tune(module, [torch.randn(16) for _ in range(4)], batch_sizes=[1, 2], strategy=strategy, executor="subprocess")
    winner = module.backends["0"]
    assert isinstance(winner, ArtifactBackend) and winner.weights is not None
    sealed = seal_of(winner)
    assert sealed is not None and sealed.artifacts["weights"].path == str(winner.weights)

    torch.save({"other": torch.zeros(1)}, winner.weights)
    with pytest.raises(CheckpointError, match=rf"module `{name}`, graph `0`, backend `ArtifactBackend\(\)`.*'weights'"):
        ait.save(module, tmp_path / "ckpt")


def test_a_winner_whose_files_differ_from_the_workers_is_refused_here(tmp_path: Path) -> None:
    weights = tmp_path / "weights.pt"
    weights.write_bytes(b"what the worker validated")
    worker_seal = ArtifactSeal.of({"weights": weights})
    weights.write_bytes(b"something else")
    backend = ArtifactBackend.from_dict({"config": {}, "artifacts": {"weights": str(weights)}})
    data = {"is_jit": False, "seal": worker_seal.to_data()}
    with pytest.raises(ExecutorError, match=r"not what the worker validated.*'weights'"):
        seal_restored(backend, data, "ArtifactBackend()")
    assert seal_of(backend) is None
