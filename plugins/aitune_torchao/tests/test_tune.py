"""Tuning with the quantized candidates, end to end through ``aitune_core.tune``.

Which candidate wins depends on the machine: int8 dynamic activation runs a slow
``_int_mm`` on some CPUs and wins on others and on GPUs. The tests therefore check
the choice against what was measured in the same run, not against a fixed answer.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core import ProfileConfig
from aitune_core.testing.models import SmallMLP
from aitune_torchao import TorchAOBackend

pytestmark = pytest.mark.usefixtures("aitune_one_thread")  # timings must not depend on the other core

FAST_PROFILE = ProfileConfig(warmup_iterations=2, window=6, min_time_s=0.02, max_time_s=0.08, max_batch_search=False)
_names = itertools.count()


def tuned(strategy: ait.TuneStrategy) -> tuple[torch.nn.Module, ait.Module, Any]:
    model = SmallMLP(width=128, hidden=512).eval()
    wrapped = ait.Module(model, f"torchao-tune-{next(_names)}")
    dataset = [torch.randn(128) for _ in range(16)]
    report = ait.tune(wrapped, dataset, batch_sizes=[4, 16], strategy=strategy)
    return model, wrapped, report


def at_batch(candidate: Any, batch_size: int) -> float:
    for measurement in candidate.sweep:
        if measurement.batch_size == batch_size:
            return float(measurement.throughput)
    return float(candidate.measurement.throughput)


def test_max_throughput_picks_the_fastest_correct_candidate() -> None:
    strategy = ait.MaxThroughputStrategy(
        backends=[TorchAOBackend(preset="int8wo"), TorchAOBackend(preset="int8dq"), ait.TorchEagerBackend()],
        profile=FAST_PROFILE,
    )
    model, wrapped, report = tuned(strategy)
    (graph,) = report.graphs
    by_name = {c.backend: c for c in graph.candidates if c.status != "fallback"}
    assert list(by_name) == [
        "TorchAOBackend(preset='int8wo')",
        "TorchAOBackend(preset='int8dq')",
        "TorchEagerBackend()",
    ]
    for name in ("TorchAOBackend(preset='int8wo')", "TorchAOBackend(preset='int8dq')"):
        candidate = by_name[name]
        assert candidate.status in ("selected", "passed", "rejected"), (name, candidate.reason)
        assert candidate.stage != "validation", f"{name} must pass the int8 tolerances: {candidate.reason}"
        assert candidate.max_abs_error is not None and 0 < candidate.max_abs_error < 5e-2
    # The strategy compares throughput at the largest tuned batch (16), as here.
    measured = {name: at_batch(c, 16) for name, c in by_name.items() if c.measurement is not None}
    fastest = max(measured, key=measured.__getitem__)
    selected = graph.selected
    assert selected is not None
    if fastest == "TorchEagerBackend()" or by_name[fastest].stage == "performance":
        # Nothing quantized beat eager by the gate: eager serves, quantized losers say why.
        assert selected.backend == "TorchEagerBackend()", [(c.backend, c.status, c.reason) for c in graph.candidates]
    else:
        assert selected.backend == fastest
        assert selected.speedup is not None and selected.speedup >= strategy.performance_gate
    x = torch.randn(16, 128)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x), atol=5e-2, rtol=5e-2)


def test_a_too_tight_tolerance_rejects_with_the_measured_error() -> None:
    strategy = ait.MaxThroughputStrategy(
        backends=[TorchAOBackend(preset="int8wo"), ait.TorchEagerBackend()],
        tolerances=ait.Tolerances.uniform(atol=1e-6, rtol=1e-6),
        profile=FAST_PROFILE,
    )
    _, _, report = tuned(strategy)
    (graph,) = report.graphs
    quantized = graph.candidates[0]
    assert (quantized.backend, quantized.status, quantized.stage) == (
        "TorchAOBackend(preset='int8wo')",
        "rejected",
        "validation",
    )
    assert quantized.max_abs_error is not None and quantized.max_abs_error > 1e-6
    assert f"max abs error {quantized.max_abs_error:.3g}" in quantized.reason
    assert "allowed atol=1e-06, rtol=1e-06" in quantized.reason
    assert graph.selected is not None and graph.selected.backend == "TorchEagerBackend()"
    assert "max abs error" in report.summary(), "the summary table shows the reason"


def test_the_configs_own_tolerance_rejects_too() -> None:
    strategy = ait.FirstWinsStrategy(
        backends=[TorchAOBackend(preset="int8dq", atol=1e-6, rtol=0.0), ait.TorchEagerBackend()],
        profile=FAST_PROFILE,
    )
    _, _, report = tuned(strategy)
    quantized = report.graphs[0].candidates[0]
    assert (quantized.status, quantized.stage) == ("rejected", "validation")
    assert "max abs error" in quantized.reason and "allowed atol=1e-06, rtol=0" in quantized.reason


def test_default_candidates_skip_the_presets_this_machine_lacks(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any
) -> None:
    """No backends named, lossy allowed: the int8 presets are tried, the rest are listed as skipped, with why."""
    aitune_isolated_plugins.load(aitune_fake_dist("aitune-torchao", entry_points={"torchao": "aitune_torchao.plugin"}))
    ait.config.allow_lossy = True
    _, _, report = tuned(ait.MaxThroughputStrategy(profile=FAST_PROFILE))
    (graph,) = report.graphs
    skipped = {c.backend: c.reason for c in graph.candidates if c.status == "skipped"}
    assert skipped["TorchAOBackend(preset='fp8dq')"] == (
        "preset 'fp8dq' needs CUDA with compute capability >= 8.9, not cpu"
    )
    assert len(skipped) == 7
    tried = [c.backend for c in graph.candidates if c.status != "skipped"]
    compiled_int8dq = "TorchAOBackend(preset='int8dq',compile=True)"
    assert tried[:3] == ["TorchAOBackend(preset='int8wo')", compiled_int8dq, "TorchEagerBackend()"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_every_preset_it_can_run_is_tried() -> None:
    """Presets the GPU lacks are skipped with the reason; the others build, validate or say why not."""
    from aitune_torchao import PRESETS

    backends = [TorchAOBackend(preset=name) for name in PRESETS]
    strategy = ait.MaxThroughputStrategy(backends=[*backends, ait.TorchEagerBackend()], profile=FAST_PROFILE)
    model = SmallMLP(width=128, hidden=512).eval().cuda()
    wrapped = ait.Module(model, f"torchao-tune-{next(_names)}")
    dataset = [torch.randn(128) for _ in range(16)]
    report = ait.tune(wrapped, dataset, batch_sizes=[4, 16], device="cuda", strategy=strategy)
    (graph,) = report.graphs
    for candidate in graph.candidates:
        assert candidate.status != "failed" or candidate.reason, candidate
        if candidate.status == "skipped":
            assert candidate.reason.startswith("preset "), candidate.reason
    statuses = {c.backend: c.status for c in graph.candidates}
    assert statuses["TorchAOBackend(preset='int8wo')"] in ("selected", "passed", "rejected")
    x = torch.randn(16, 128, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(x), atol=2.5e-1, rtol=2.5e-1)
