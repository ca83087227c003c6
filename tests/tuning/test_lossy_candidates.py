"""Default candidates that change the numbers on purpose are tried only when the user opts in.

A test plugin offers two default candidates: one that returns eager's numbers and one
that rounds them to bfloat16 (a stand-in for quantization) and says it is lossy. No
verdict here depends on the wall clock: the strategies run with the performance gate
off, or only look at which candidates were tried.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from tuning_helpers import FAST_PROFILE, SlowableMLP

import aitune_core as ait
from aitune_core.backends.eager import TorchEagerBackend
from aitune_core.config import Config, config
from aitune_core.strategies.defaults import LOSSY_REASON
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins

PLUGIN_SOURCE = """
import attrs
import torch

from aitune_core.backends.base import Backend, BackendConfig
from aitune_core.plugins import DEFAULT_PRIORITY, Candidate, hookimpl
from aitune_core.backends.tolerances import Tolerances

AITUNE_PLUGIN_API = 1


@attrs.frozen
class RoundingConfig(BackendConfig):
    pass


class _Runs(Backend):
    config_class = RoundingConfig

    @property
    def is_jit(self):
        return True

    def _build(self, context):
        self.module = context.module

    def _activate(self):
        self.module = self.context.module

    def _deactivate(self):
        self.module = None

    def _infer(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class ExactBackend(_Runs):
    name = "test_exact"


class RoundingBackend(_Runs):
    name = "test_rounding"

    @property
    def lossy(self):
        return True

    def default_tolerances(self):
        return Tolerances.uniform(atol=5e-2, rtol=5e-2)

    def _infer(self, *args, **kwargs):
        return super()._infer(*args, **kwargs).to(torch.bfloat16).to(torch.float32)


@hookimpl
def aitune_register_backends():
    return [ExactBackend, RoundingBackend]


@hookimpl
def aitune_default_candidates(device):
    return [
        Candidate(RoundingBackend(), priority=DEFAULT_PRIORITY + 10),
        Candidate(ExactBackend(), priority=DEFAULT_PRIORITY),
    ]
"""

LOSSY = "RoundingBackend()"
EXACT = "ExactBackend()"


@pytest.fixture
def plugin(aitune_fake_dist: Callable[..., Any], aitune_isolated_plugins: Any) -> Any:
    """The test plugin, alone with the built-in one; returns its module."""
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-test-lossy", source=PLUGIN_SOURCE))
    import aitune_test_lossy

    return aitune_test_lossy


def tune(unique_name: Callable[[str], str], strategy: ait.TuneStrategy, **options: Any) -> Any:
    wrapped = ait.Module(SlowableMLP().eval(), unique_name("lossy"))
    dataset = [torch.randn(16) for _ in range(4)]
    return ait.tune(wrapped, dataset, batch_sizes=[1, 2], strategy=strategy, **options)


def first_wins() -> ait.TuneStrategy:
    """Tries the candidates in priority order and keeps the first that validates, whatever the clock says."""
    return ait.FirstWinsStrategy(profile=FAST_PROFILE).enable_performance_validation(False)


def rows(report: Any) -> dict[str, Any]:
    return {row.backend: row for row in report.graphs[0].candidates}


def test_lossy_defaults_are_skipped_with_how_to_opt_in(plugin: Any, unique_name: Any) -> None:
    report = tune(unique_name, first_wins())
    lossy = rows(report)[LOSSY]
    assert (lossy.status, lossy.stage, lossy.reason) == ("skipped", "lossy", LOSSY_REASON)
    assert "ait.config.allow_lossy = True" in lossy.reason
    assert report.graphs[0].selected.backend == EXACT, "lossless defaults are still tried"
    assert LOSSY_REASON[:60] in report.summary()


def test_max_throughput_with_defaults_never_tries_a_lossy_candidate(plugin: Any, unique_name: Any) -> None:
    report = tune(unique_name, ait.MaxThroughputStrategy(profile=FAST_PROFILE))
    tried = [row.backend for row in report.graphs[0].candidates if row.status != "skipped"]
    assert LOSSY not in tried and EXACT in tried
    assert report.graphs[0].selected.backend != LOSSY


def test_allow_lossy_tries_them_and_the_summary_shows_the_error(plugin: Any, unique_name: Any) -> None:
    config.allow_lossy = True
    report = tune(unique_name, first_wins())
    lossy = rows(report)[LOSSY]
    assert lossy.status == "selected", lossy.reason
    assert lossy.max_abs_error is not None and 0 < lossy.max_abs_error < 5e-2
    note = f"lossy: max abs error {lossy.max_abs_error:.3g}, max rel error {lossy.max_rel_error:.3g}"
    assert note in report.summary()


def test_only_lossy_rows_are_marked(plugin: Any, unique_name: Any) -> None:
    config.allow_lossy = True
    strategy = ait.MaxThroughputStrategy(profile=FAST_PROFILE).enable_performance_validation(False)
    report = tune(unique_name, strategy)
    reasons = {row[2]: row[-1] for row in report.rows()}
    assert set(reasons) >= {LOSSY, EXACT, "TorchEagerBackend()"}
    assert reasons[LOSSY].startswith("lossy: max abs error ")
    assert not any("lossy" in reason for backend, reason in reasons.items() if backend != LOSSY)


def test_a_named_lossy_backend_is_always_tried(plugin: Any, unique_name: Any) -> None:
    strategy = ait.FirstWinsStrategy([plugin.RoundingBackend(), TorchEagerBackend()], profile=FAST_PROFILE)
    report = tune(unique_name, strategy.enable_performance_validation(False))
    assert rows(report)[LOSSY].status == "selected"


def test_tolerances_given_to_the_strategy_opt_in(plugin: Any, unique_name: Any) -> None:
    strategy = ait.FirstWinsStrategy(tolerances=ait.Tolerances.uniform(atol=5e-2, rtol=5e-2), profile=FAST_PROFILE)
    report = tune(unique_name, strategy.enable_performance_validation(False))
    assert rows(report)[LOSSY].status == "selected"


def test_the_strategys_tolerances_judge_the_lossy_candidate(plugin: Any, unique_name: Any) -> None:
    strategy = ait.FirstWinsStrategy(tolerances=ait.Tolerances.uniform(atol=1e-7, rtol=0.0), profile=FAST_PROFILE)
    report = tune(unique_name, strategy.enable_performance_validation(False))
    lossy = rows(report)[LOSSY]
    assert (lossy.status, lossy.stage) == ("rejected", "validation")
    assert "lossy; " in report.summary(), "the rejection names the error once, after the mark"


def test_the_dry_run_plan_shows_the_skip(plugin: Any, unique_name: Any) -> None:
    report = tune(unique_name, ait.MaxThroughputStrategy(), dry_run=True)
    assert f"  {LOSSY} (skipped: {LOSSY_REASON})" in report.plan
    assert f"  {EXACT} (available)" in report.plan
    config.allow_lossy = True
    report = tune(unique_name, ait.MaxThroughputStrategy(), dry_run=True)
    assert f"  {LOSSY} (available)" in report.plan


def test_backends_declare_what_they_change() -> None:
    assert not TorchEagerBackend().lossy
    assert TorchEagerBackend(autocast_enabled=True).lossy


def test_allow_lossy_is_checked_when_set() -> None:
    with pytest.raises(ValueError, match=r"config.allow_lossy must be True or False, got 'yes'"):
        config.allow_lossy = "yes"  # type: ignore[assignment]
    assert config.allow_lossy is False


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("true", True), ("0", False), ("", False)])
def test_allow_lossy_reads_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("AITUNE_ALLOW_LOSSY", value)
    assert Config().allow_lossy is expected


def test_a_bad_environment_value_names_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITUNE_ALLOW_LOSSY", "maybe")
    with pytest.raises(ValueError, match="AITUNE_ALLOW_LOSSY must be 1 or 0"):
        Config()
