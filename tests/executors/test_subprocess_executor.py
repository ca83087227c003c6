"""The subprocess executor: crashing, hanging and greedy candidates fail alone; the tuning goes on.

Each child imports torch (a second or two), so candidates share few, parallel runs.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from executor_backends import (
    FAST_PROFILE,
    AbortBackend,
    ArtifactBackend,
    ExitBackend,
    FastBackend,
    GreedyBackend,
    HangBackend,
    SlowableMLP,
)

import aitune_core as ait
from aitune_core.backends import BackendState, TorchEagerBackend
from aitune_core.evaluate.result import CandidateFailedError
from aitune_core.executors import SubprocessExecutor
from aitune_core.log import capture
from aitune_core.module.wrapper import MODULE_REGISTRY
from aitune_core.plugins import manager
from aitune_core.strategies import FirstWinsStrategy, MaxThroughputStrategy, OneBackendStrategy
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins

TIMEOUT_S = 12  # a healthy child needs ~3 s here (more on a busy machine); the hanging one sleeps for minutes


def samples(count: int = 4) -> list[torch.Tensor]:
    return [torch.randn(16) for _ in range(count)]


@pytest.mark.slow  # child processes and their limits
def test_abort_hang_and_out_of_memory_are_failed_rows_and_the_rest_is_tuned(unique_name: Callable[..., str]) -> None:
    model = SlowableMLP(0.005).eval()
    module = ait.Module(model, unique_name())
    registry = manager.current_registry()
    strategy = MaxThroughputStrategy(
        [AbortBackend(), HangBackend(), GreedyBackend(), FastBackend(), TorchEagerBackend()], profile=FAST_PROFILE
    )
    executor = SubprocessExecutor(workers=2, timeout_s=TIMEOUT_S, memory_limit_mb=3072)
    with capture() as events:
        report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor=executor)

    rows = {row.backend: row for row in report.graphs[0].candidates}
    aborted, hung, greedy = rows["AbortBackend()"], rows["HangBackend()"], rows["GreedyBackend()"]
    assert (aborted.status, aborted.stage, aborted.reason) == ("failed", "build", "killed by SIGABRT")
    assert "Fatal Python error: Aborted" in aborted.log_tail  # the end of the child's log
    assert (hung.status, hung.stage, hung.reason) == ("failed", "build", f"timed out after {TIMEOUT_S} s")
    assert greedy.status == "failed" and greedy.reason.startswith("out of memory")
    assert rows["FastBackend()"].status == "selected" and rows["TorchEagerBackend()"].status == "passed"
    host = socket.gethostname()
    assert all(row.worker.endswith(f"@{host}") for row in rows.values())

    # The parent is untouched: same registry, module registered, routed to a live winner.
    assert manager.current_registry() is registry
    assert MODULE_REGISTRY.modules[module.name] is module
    winner = module.backends["0"]
    assert isinstance(winner, FastBackend) and winner.state is BackendState.ACTIVE
    x = torch.randn(2, 16)
    torch.testing.assert_close(module(x), model(x))

    failed = [e for e in events if e["event"] == "build failed"]
    assert {e["reason"] for e in failed} >= {"killed by SIGABRT", f"timed out after {TIMEOUT_S} s"}
    assert all(e["worker"].endswith(f"@{host}") for e in failed)
    summary = report.summary()
    assert "Worker" in summary and aborted.worker in summary


def test_a_worker_that_exits_before_answering_says_how_it_ended(unique_name: Callable[..., str]) -> None:
    # Status 0 mid-build used to leave the row the worker writes as each stage starts,
    # which has no reason: the summary showed a failed build and nothing else.
    module = ait.Module(SlowableMLP().eval(), unique_name())
    exits = [ExitBackend(status=0), ExitBackend(status=5), ExitBackend(signal=int(signal.SIGTERM))]
    strategy = MaxThroughputStrategy([*exits, TorchEagerBackend()], profile=FAST_PROFILE)
    executor = SubprocessExecutor(workers=2, timeout_s=TIMEOUT_S, memory_limit_mb=None)
    report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor=executor)

    rows = [row for row in report.graphs[0].candidates if row.backend.startswith("ExitBackend")]
    assert [(row.status, row.stage) for row in rows] == [("failed", "build")] * 3
    assert [row.reason for row in rows] == [
        "worker exited with status 0 before writing a result",
        "worker exited with status 5 before writing a result",
        "killed by SIGTERM",
    ]
    assert module.backends["0"].state is BackendState.ACTIVE  # eager passed, and serves


# Registers the test backends by name, as an installed plugin would: the child finds them through
# the registry, and a checkpoint can name them.
_PLUGIN = """
from aitune_core import hookimpl
from executor_backends import ArtifactBackend, FastBackend

AITUNE_PLUGIN_API = 1


@hookimpl
def aitune_register_backends():
    return [ArtifactBackend, FastBackend]
"""


def test_aot_winner_comes_back_from_its_artifact_and_saves(
    unique_name: Callable[..., str], tmp_path: Path, aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-executor-tests", _PLUGIN))
    model = SlowableMLP(0.005).eval()
    module = ait.Module(model, unique_name())
    strategy = FirstWinsStrategy([ArtifactBackend()], profile=FAST_PROFILE)
    report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor="subprocess")
    row = report.graphs[0].candidates[0]
    assert row.status == "selected" and row.speedup is not None and row.speedup > 1.01
    assert sorted(row.speedups) == [2]  # restored here, then timed against eager (sweep off: the largest batch)
    winner = module.backends["0"]
    assert isinstance(winner, ArtifactBackend) and winner.state is BackendState.ACTIVE
    assert winner.loaded_from is not None  # from_dict + activate: it read the child's file
    assert winner.loaded_from.is_relative_to(ait.config.cache_dir / "builds")  # the child built in this cache
    assert winner.loaded_from.parent.name.startswith(f"{os.getpid()}-")  # for this process, which holds it
    x = torch.randn(2, 16)
    torch.testing.assert_close(module(x), model(x))

    ait.save(module, tmp_path / "ckpt")
    del module
    restored = ait.load(SlowableMLP(0.005).eval(), tmp_path / "ckpt")
    torch.testing.assert_close(restored(x), model(x))


def test_one_backend_strategy_raises_the_child_failure(unique_name: Callable[..., str]) -> None:
    module = ait.Module(SlowableMLP().eval(), unique_name())
    with pytest.raises(CandidateFailedError, match="killed by SIGABRT"):
        ait.tune(
            module,
            samples(),
            batch_sizes=[1, 2],
            strategy=OneBackendStrategy(AbortBackend(), profile=FAST_PROFILE),
            executor="subprocess",
        )
