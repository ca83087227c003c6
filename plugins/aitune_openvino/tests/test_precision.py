"""float32 is pinned and checked; bf16 is lossy and follows allow_lossy.

OpenVINO's CPU plugin computes float32 models in bfloat16 where the CPU has it, unless
told otherwise. No verdict here reads the clock: strategies run with the performance
gate off, or only their rows are looked at.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from openvino_helpers import served_by, tune_alone

import aitune_core as ait
from aitune_core.testing.models import SmallMLP
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_openvino import OpenVINOBackend
from aitune_openvino import runtime as runtime_module
from aitune_openvino.availability import precision_availability

pytestmark = pytest.mark.slow

BF16 = precision_availability("bf16")
needs_bf16 = pytest.mark.skipif(not BF16.available, reason=BF16.reason)
EXACT = "OpenVINOBackend()"
REDUCED = "OpenVINOBackend(inference_precision='bf16')"


@pytest.fixture
def openvino_only(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    """This plugin alone with the built-in one, as if it were the only one installed."""
    aitune_isolated_plugins.load(
        aitune_fake_dist("aitune-openvino", entry_points={"openvino": "aitune_openvino.plugin"})
    )


def dataset() -> list[torch.Tensor]:
    return [torch.randn(32) for _ in range(4)]


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return SmallMLP().eval()


def rows(report: Any) -> dict[str, Any]:
    return {row.backend: row for row in report.graphs[0].candidates}


def test_float32_is_pinned_where_the_cpu_would_pick_bf16() -> None:
    wrapped, _ = tune_alone(model(), dataset(), batch_sizes=[1, 4])
    (backend,) = served_by(wrapped)
    assert backend.compiled.precision == "f32" and backend.build_info["inference_precision"] == "f32"
    if BF16.available:  # the pin matters here: left alone, OpenVINO would compute in bf16
        from openvino import Core

        assert Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name() == "bf16"


@needs_bf16
def test_a_compile_that_lost_float32_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build asks the compiled model for its precision: one that is not f32 fails the candidate."""
    real = runtime_module.compile_properties

    def forgetful(config: Any, hint: str, threads: int) -> dict[Any, Any]:
        properties = real(config, hint, threads)
        return {key: value for key, value in properties.items() if str(key) != "INFERENCE_PRECISION_HINT"}

    monkeypatch.setattr(runtime_module, "compile_properties", forgetful)
    wrapped = ait.Module(model(), "openvino-forgetful")
    strategy = ait.MaxThroughputStrategy([OpenVINOBackend()], profile=SHORT_PROFILE)  # a failed row, not a raise
    report = ait.tune(wrapped, dataset(), batch_sizes=[1, 4], strategy=strategy)
    row = rows(report)[EXACT]
    assert row.status == "failed" and "inference precision bf16 although f32 was asked for" in row.reason


def test_bf16_is_skipped_without_allow_lossy(openvino_only: None) -> None:
    strategy = ait.MaxThroughputStrategy(profile=SHORT_PROFILE).enable_performance_validation(False)
    report = ait.tune(ait.Module(model(), "openvino-lossy-off"), dataset(), batch_sizes=[1, 4], strategy=strategy)
    reduced = rows(report)[REDUCED]
    assert reduced.status == "skipped" and "lossy" in reduced.reason
    assert rows(report)[EXACT].status in ("selected", "passed")


@needs_bf16
def test_allow_lossy_tries_bf16_and_the_summary_shows_its_error(openvino_only: None) -> None:
    ait.config.allow_lossy = True
    strategy = ait.MaxThroughputStrategy(profile=SHORT_PROFILE).enable_performance_validation(False)
    report = ait.tune(ait.Module(model(), "openvino-lossy-on"), dataset(), batch_sizes=[1, 4], strategy=strategy)
    reduced = rows(report)[REDUCED]
    assert reduced.status in ("selected", "passed"), reduced.reason
    assert reduced.max_abs_error is not None and 0 < reduced.max_abs_error < 5e-2
    assert f"lossy: max abs error {reduced.max_abs_error:.3g}" in report.summary()
