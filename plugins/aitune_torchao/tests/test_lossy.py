"""Quantization changes the numbers on purpose: its presets are tried only when the user opts in.

Which candidate is fastest depends on the machine, so no verdict here reads the clock:
the tests look at which candidates were tried, or run FirstWinsStrategy with the
performance gate off, where the first candidate that validates is selected.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.engine import LOSSY_REASON
from aitune_core.testing.models import SmallMLP
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_torchao import PRESETS, TorchAOBackend
from aitune_torchao.backend import torchao_availability

_names = itertools.count()

needs_torchao = pytest.mark.skipif(
    not torchao_availability().available, reason=torchao_availability().reason or "torchao unavailable"
)


@pytest.fixture
def torchao_only(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    """The torchao plugin alone with the built-in one, as if it were the only one installed."""
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-torchao", entry_points={"torchao": "aitune_torchao.plugin"}))


def tune(strategy: ait.TuneStrategy | None, **options: Any) -> Any:
    model = SmallMLP(width=64, hidden=128).eval()
    wrapped = ait.Module(model, f"torchao-lossy-{next(_names)}")
    dataset = [torch.randn(64) for _ in range(4)]
    return ait.tune(wrapped, dataset, batch_sizes=[2, 4], strategy=strategy, **options)


def rows(report: Any) -> dict[str, Any]:
    return {row.backend: row for row in report.graphs[0].candidates}


def first_wins(*backends: Any) -> ait.TuneStrategy:
    strategy = ait.FirstWinsStrategy(list(backends) if backends else None, profile=SHORT_PROFILE)
    return strategy.enable_performance_validation(False)


def test_every_preset_and_config_is_lossy() -> None:
    assert all(TorchAOBackend(preset=name).lossy for name in PRESETS)
    assert TorchAOBackend(preset="int8wo", compile=True).lossy


@pytest.mark.together  # the plan holds every installed plugin's candidates
def test_the_plan_of_the_default_strategy_skips_every_preset() -> None:
    """With every installed plugin and no strategy: nothing is built, and no preset is planned."""
    from aitune_core.testing.engine import DemoMLP

    wrapped = ait.Module(DemoMLP(width=16, hidden=32).eval(), f"torchao-lossy-{next(_names)}")
    report = ait.tune(wrapped, [torch.randn(16) for _ in range(4)], batch_sizes=[1, 2], dry_run=True)
    planned = [line for line in report.plan if "TorchAOBackend(" in line]
    assert len(planned) == len(PRESETS)
    assert all("(skipped: " in line for line in planned)
    assert "  TorchAOBackend(preset='int8dq',compile=True) (skipped: " + LOSSY_REASON + ")" in report.plan


@needs_torchao
def test_the_default_strategy_never_tries_a_preset(torchao_only: None) -> None:
    report = tune(ait.MaxThroughputStrategy(profile=SHORT_PROFILE))
    by_name = rows(report)
    presets = {name: row for name, row in by_name.items() if name.startswith("TorchAOBackend(")}
    assert len(presets) == len(PRESETS)
    assert all(row.status == "skipped" for row in presets.values()), presets
    assert by_name["TorchAOBackend(preset='int8wo')"].reason == LOSSY_REASON
    assert by_name["TorchAOBackend(preset='int8dq',compile=True)"].stage == "lossy"
    assert report.graphs[0].selected.backend == "TorchEagerBackend()"


@needs_torchao
def test_allow_lossy_tries_the_presets_and_the_summary_shows_the_error(torchao_only: None) -> None:
    ait.config.allow_lossy = True
    report = tune(first_wins())
    by_name = rows(report)
    int8wo = by_name["TorchAOBackend(preset='int8wo')"]
    assert int8wo.status == "selected", int8wo.reason
    assert int8wo.max_abs_error is not None and 0 < int8wo.max_abs_error < 5e-2
    assert f"lossy: max abs error {int8wo.max_abs_error:.3g}" in report.summary()


@needs_torchao
@pytest.mark.slow  # int8dq, a default candidate on the CPU, compiles
def test_allow_lossy_lets_max_throughput_try_them(torchao_only: None) -> None:
    ait.config.allow_lossy = True
    report = tune(ait.MaxThroughputStrategy(profile=SHORT_PROFILE).enable_performance_validation(False))
    for name in ("TorchAOBackend(preset='int8wo')", "TorchAOBackend(preset='int8dq',compile=True)"):
        assert rows(report)[name].status in ("selected", "passed"), rows(report)[name].reason


@needs_torchao
def test_a_named_preset_is_tried_without_allow_lossy() -> None:
    report = tune(first_wins(TorchAOBackend(preset="int8dq"), ait.TorchEagerBackend()))
    int8dq = rows(report)["TorchAOBackend(preset='int8dq')"]
    assert int8dq.status == "selected", int8dq.reason
    assert f"lossy: max abs error {int8dq.max_abs_error:.3g}" in report.summary()
