"""tune() end to end on small real models, with the eager backend and test backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import torch
from torch import nn
from tuning_helpers import (
    FAST_PROFILE,
    BrokenBuildBackend,
    BuildError,
    FixedCostBackend,
    NaNBackend,
    NoDelayBackend,
    PerSampleCostMLP,
    SlowableMLP,
    SlowBackend,
    WrongBackend,
)

import aitune_core as ait
from aitune_core.backends import BackendState, TorchEagerBackend
from aitune_core.config import config
from aitune_core.log import capture
from aitune_core.module import ModuleState, UnsupportedCallError
from aitune_core.profiling.timer import EAGER, ScriptedTimer
from aitune_core.strategies import (
    FirstWinsStrategy,
    LatencyBudgetStrategy,
    MaxThroughputStrategy,
    MinLatencyStrategy,
    OneBackendStrategy,
)
from aitune_core.tuning import TuningError, tune


def samples(count: int = 8, width: int = 16) -> list[torch.Tensor]:
    return [torch.randn(width) for _ in range(count)]


def test_tune_routes_to_the_selected_backend_and_matches_eager(unique_name):
    model = SlowableMLP(delay_s=0.002).eval()
    module = ait.Module(model, unique_name("mlp"))
    strategy = FirstWinsStrategy([NoDelayBackend()], profile=FAST_PROFILE)
    report = tune(module, samples(), batch_sizes=[1, 2, 4], strategy=strategy)

    assert module.state is ModuleState.TUNED
    backend = module.backends["0"]
    assert isinstance(backend, NoDelayBackend) and backend.state is BackendState.ACTIVE
    assert report.selected(module.name) == "NoDelayBackend()"
    x = torch.randn(3, 16)
    torch.testing.assert_close(module(x), model(x))
    row = report.graphs[0].candidates[0]
    assert row.status == "selected" and row.speedup is not None and row.speedup > 1.01


def test_blueprint_given_by_the_user_is_never_built(unique_name):
    blueprint = NoDelayBackend()
    module = ait.Module(SlowableMLP(0.002).eval(), unique_name())
    tune(module, samples(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([blueprint], profile=FAST_PROFILE))
    assert blueprint.state is BackendState.INIT
    assert module.backends["0"] is not blueprint


def test_backend_returning_wrong_numbers_is_rejected_with_the_error(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    strategy = MaxThroughputStrategy([WrongBackend(), TorchEagerBackend()], profile=FAST_PROFILE)
    report = tune(module, samples(), batch_sizes=[1, 2, 4], strategy=strategy)
    wrong = report.graphs[0].candidates[0]
    assert wrong.backend == "WrongBackend()"
    assert wrong.status == "rejected" and wrong.stage == "validation"
    assert "differs from eager" in wrong.reason and "max abs error" in wrong.reason
    assert isinstance(module.backends["0"], TorchEagerBackend)


def test_tolerance_can_be_widened_to_accept_a_small_error(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    strategy = FirstWinsStrategy([WrongBackend(factor=1.0 + 1e-5)], profile=FAST_PROFILE)
    strategy.enable_performance_validation(False)
    tune(module, samples(), batch_sizes=[1, 2], strategy=strategy)
    assert isinstance(module.backends["0"], WrongBackend)


def test_nan_outputs_are_rejected(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    report = tune(
        module, samples(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([NaNBackend()], profile=FAST_PROFILE)
    )
    assert "NaN" in report.graphs[0].candidates[0].reason
    assert isinstance(module.backends["0"], TorchEagerBackend)


def test_correctness_check_can_be_disabled(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    strategy = FirstWinsStrategy([WrongBackend()], profile=FAST_PROFILE)
    strategy.enable_correctness_check(False).enable_performance_validation(False)
    report = tune(module, samples(), batch_sizes=[1, 2], strategy=strategy)
    assert isinstance(module.backends["0"], WrongBackend)
    assert report.graphs[0].candidates[0].speedup is None


def test_first_wins_moves_on_after_a_build_error(unique_name):
    module = ait.Module(SlowableMLP(0.002).eval(), unique_name())
    strategy = FirstWinsStrategy([BrokenBuildBackend(), NoDelayBackend()], profile=FAST_PROFILE)
    report = tune(module, samples(), batch_sizes=[1, 2], strategy=strategy)
    broken, winner = report.graphs[0].candidates
    assert broken.status == "failed" and broken.stage == "build"
    assert broken.reason == "BuildError: compiler exploded"
    assert winner.status == "selected"


def test_one_backend_reraises_the_original_build_error(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    with pytest.raises(BuildError, match="compiler exploded"):
        tune(
            module,
            samples(),
            batch_sizes=[1, 2],
            strategy=OneBackendStrategy(BrokenBuildBackend(), profile=FAST_PROFILE),
        )


def test_one_backend_falls_back_to_eager_when_correct_but_slower(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    timer = ScriptedTimer({EAGER: 1e-3, "SlowBackend()": 2e-3})
    report = tune(
        module,
        samples(),
        batch_sizes=[1, 2],
        strategy=OneBackendStrategy(SlowBackend(), profile=FAST_PROFILE, timer=timer),
    )
    slow, fallback = report.graphs[0].candidates
    assert slow.status == "rejected" and slow.stage == "performance" and "gate" in slow.reason
    assert fallback.status == "fallback"
    assert isinstance(module.backends["0"], TorchEagerBackend)


def test_every_candidate_failing_keeps_the_module_eager_and_tune_returns(unique_name):
    model = SlowableMLP().eval()
    module = ait.Module(model, unique_name())
    report = tune(
        module,
        samples(),
        batch_sizes=[1, 2],
        strategy=FirstWinsStrategy([BrokenBuildBackend(), WrongBackend()], profile=FAST_PROFILE),
    )
    assert report.graphs[0].selected.status == "fallback"
    x = torch.randn(2, 16)
    torch.testing.assert_close(module(x), model(x))


def test_every_candidate_failing_can_raise(unique_name):
    config.on_all_candidates_failed = "raise"
    module = ait.Module(SlowableMLP().eval(), unique_name())
    with pytest.raises(TuningError, match="no candidate qualified"):
        tune(
            module,
            samples(),
            batch_sizes=[1, 2],
            strategy=FirstWinsStrategy([BrokenBuildBackend()], profile=FAST_PROFILE),
        )


def test_max_throughput_picks_the_fastest_correct_candidate(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    timer = ScriptedTimer({EAGER: 1e-3, "SlowBackend()": 3e-3, "NoDelayBackend()": 1e-4, "TorchEagerBackend()": 1e-3})
    strategy = MaxThroughputStrategy(
        [SlowBackend(), WrongBackend(), NoDelayBackend(), TorchEagerBackend()], profile=FAST_PROFILE, timer=timer
    )
    report = tune(module, samples(), batch_sizes=[1, 2, 4], strategy=strategy)
    rows = {c.backend: c for c in report.graphs[0].candidates}
    assert rows["NoDelayBackend()"].status == "selected"
    assert rows["WrongBackend()"].status == "rejected" and rows["WrongBackend()"].stage == "validation"
    assert (rows["SlowBackend()"].status, rows["SlowBackend()"].stage) == ("rejected", "performance")
    assert "0.33x" in rows["SlowBackend()"].reason
    assert rows["TorchEagerBackend()"].status == "passed"
    assert rows["NoDelayBackend()"].speedup == pytest.approx(10.0)


def test_max_throughput_widens_the_batch_range_it_found(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    profile = attrs.evolve(FAST_PROFILE, saturation=0.0, max_batch_size=16)
    tune(module, samples(), batch_sizes=[1, 2], strategy=MaxThroughputStrategy([TorchEagerBackend()], profile=profile))
    spec = module.graph_specs[0].input_spec.tensor_data[0][1]
    assert spec.max_shape[0] == 16
    assert module.graph_specs[0].output_spec.tensor_data[0][1].max_shape[0] == 16


def test_min_latency_and_latency_budget_strategies(unique_name):
    timer = ScriptedTimer({EAGER: 2e-3, "SlowBackend()": 3e-3, "NoDelayBackend()": 1e-4})
    fast = ait.Module(SlowableMLP().eval(), unique_name())
    tune(
        fast,
        samples(),
        batch_sizes=[1, 2],
        strategy=MinLatencyStrategy([SlowBackend(), NoDelayBackend()], profile=FAST_PROFILE, timer=timer),
    )
    assert isinstance(fast.backends["0"], NoDelayBackend)

    budget = ait.Module(SlowableMLP().eval(), unique_name())
    slow = ScriptedTimer({EAGER: 30e-3, "SlowBackend(delay_s=0.02)": 20e-3})  # faster than eager, over budget
    report = tune(
        budget,
        samples(),
        batch_sizes=[1, 2],
        strategy=LatencyBudgetStrategy([SlowBackend(delay_s=0.02)], budget_ms=5, profile=FAST_PROFILE, timer=slow),
    )
    slow = report.graphs[0].candidates[0]
    assert slow.status == "rejected" and "budget" in slow.reason
    assert isinstance(budget.backends["0"], TorchEagerBackend)


def test_unseen_graph_and_out_of_range_shapes_fall_back_to_eager_with_one_warning(unique_name):
    model = SlowableMLP(0.002).eval()
    module = ait.Module(model, unique_name())
    tune(module, samples(), batch_sizes=[1, 2, 4], strategy=FirstWinsStrategy([NoDelayBackend()], profile=FAST_PROFILE))
    big = torch.randn(9, 16)
    with capture() as events:
        for _ in range(3):
            torch.testing.assert_close(module(big), model(big))
        torch.testing.assert_close(module(big[0]), model(big[0]))  # rank 1: a graph never seen
    warnings = [e for e in events if e["event"] == "falling back to eager"]
    assert len(warnings) == 2
    assert "outside the tuned range" in warnings[0]["reason"]
    assert "not seen" in warnings[1]["reason"]


def test_fallback_can_raise(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    tune(module, samples(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE))
    config.fallback = "raise"
    with pytest.raises(UnsupportedCallError, match="outside the tuned range"):
        module(torch.randn(5, 16))


def test_tune_twice_retunes_and_keeps_graphs(unique_name):
    model = SlowableMLP(0.002).eval()
    module = ait.Module(model, unique_name())
    strategy = FirstWinsStrategy([NoDelayBackend()], profile=FAST_PROFILE)
    tune(module, samples(), batch_sizes=[1, 2], strategy=strategy)
    first = module.backends["0"]
    tune(module, samples(), batch_sizes=[4, 8], strategy=strategy)
    assert first.state is BackendState.INACTIVE
    assert module.backends["0"] is not first
    assert module.graph_specs[0].input_spec.tensor_data[0][1].max_shape[0] == 8
    assert module.graph_specs[0].input_spec.tensor_data[0][1].min_shape[0] == 1
    x = torch.randn(8, 16)
    torch.testing.assert_close(module(x), model(x))


def test_modules_are_tuned_one_by_one_with_others_deactivated(unique_name):
    class Pipeline(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = SlowableMLP()
            self.second = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.second(self.first(x))

    pipeline = Pipeline().eval()
    reference = Pipeline().eval()
    reference.load_state_dict(pipeline.state_dict())
    states: list[tuple[str, str]] = []

    class Recording(FirstWinsStrategy):
        def _pre_tune(self, run):  # type: ignore[no-untyped-def]
            name = run.session.module_name
            states.append((name, pipeline.first.state.name if name != first_name else pipeline.second.state.name))

    first_name, second_name = unique_name("first"), unique_name("second")
    strategy = Recording([TorchEagerBackend()], profile=FAST_PROFILE)
    pipeline.first = ait.Module(pipeline.first, first_name, strategy=strategy)
    pipeline.second = ait.Module(pipeline.second, second_name, strategy=strategy)
    report = tune(pipeline, samples(), batch_sizes=[1, 2])
    assert [state for _, state in states] == ["INACTIVE", "INACTIVE"]
    assert {g.module for g in report.graphs} == {first_name, second_name}
    assert pipeline.first.state is ModuleState.TUNED and pipeline.second.state is ModuleState.TUNED
    x = torch.randn(2, 16)
    torch.testing.assert_close(pipeline(x), reference(x))


def test_cache_dir_setting_moves_builds(unique_name, tmp_path: Path):
    config.cache_dir = tmp_path / "elsewhere"
    module = ait.Module(SlowableMLP().eval(), unique_name())
    tune(module, samples(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE))
    backend = module.backends["0"]
    assert backend.context.cache_dir.is_relative_to(tmp_path / "elsewhere" / "builds")
    assert backend.context.cache_dir.is_dir()


def test_dataset_forms(unique_name):
    class TwoInputs(nn.Module):
        def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return x * scale

    model = TwoInputs().eval()
    strategy = FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE)
    tuple_module = ait.Module(model, unique_name("tuples"), strategy=strategy)
    tune(tuple_module, [(torch.randn(4), torch.randn(1)) for _ in range(3)], batch_sizes=[1, 2])
    assert [loc.display_path for loc in tuple_module.graph_specs[0].input_spec.locators] == ["x", "scale"]
    del tuple_module

    dict_module = ait.Module(model, unique_name("dicts"), strategy=strategy)
    tune(dict_module, [{"scale": torch.randn(1), "x": torch.randn(4)} for _ in range(3)], batch_sizes=[2, 4])
    assert dict_module.graph_specs[0].input_spec.tensor_data[0][1].shape == ["batch0", 4]
    del dict_module

    tensor_module = ait.Module(SlowableMLP().eval(), unique_name("tensor"), strategy=strategy)
    tune(tensor_module, torch.randn(5, 16), batch_sizes=[1, 8])  # 5 samples, repeated up to 8
    assert tensor_module.graph_specs[0].input_spec.tensor_data[0][1].max_shape == [8, 16]
    del tensor_module

    dataset_module = ait.Module(SlowableMLP().eval(), unique_name("dataset"), strategy=strategy)
    tune(dataset_module, torch.utils.data.TensorDataset(torch.randn(4, 16)), batch_sizes=[1, 2])
    assert len(dataset_module.graph_specs) == 1


def test_bad_inputs_give_clear_errors(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    with pytest.raises(ValueError, match="dataset is empty"):
        tune(module, [], batch_sizes=[1, 2])
    with pytest.raises(ValueError, match="at least 1"):
        tune(module, samples(), batch_sizes=[0, 2])
    with pytest.raises(ValueError, match="different shapes"):
        tune(module, [torch.randn(16), torch.randn(15)], batch_sizes=[2])
    with pytest.raises(TypeError, match="callable"):
        tune("not a model", samples())  # type: ignore[arg-type]


def test_func_that_calls_no_module_is_an_error(unique_name):
    module = ait.Module(SlowableMLP(), unique_name())  # noqa: F841 - exists, but is not called
    with pytest.raises(TuningError, match="called no aitune module"):
        tune(lambda x: x * 2, samples(), batch_sizes=[1, 2])


def test_single_batch_size_warns_static_shapes(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    with capture() as events:
        tune(
            module, samples(), batch_sizes=[4], strategy=FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE)
        )
    assert any("treated as static" in e["event"] for e in events)
    assert module.graph_specs[0].input_spec.tensor_data[0][1].shape == [4, 16]


def test_dry_run_builds_nothing_and_lists_the_plan(unique_name):
    module = ait.Module(SlowableMLP().eval(), unique_name())
    blueprint = NoDelayBackend()
    report = tune(
        module,
        samples(),
        batch_sizes=[1, 2],
        dry_run=True,
        strategy=FirstWinsStrategy([blueprint, BrokenBuildBackend()]),
    )
    assert report.dry_run and module.state is ModuleState.RECORDING
    assert blueprint.state is BackendState.INIT
    text = report.summary()
    assert "NoDelayBackend() (available)" in text and "BrokenBuildBackend()" in text
    assert not module.backends


def test_tuning_runs_without_gradients(unique_name):
    seen: list[bool] = []

    class Probe(SlowableMLP):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(torch.is_grad_enabled())
            return super().forward(x)

    module = ait.Module(Probe().eval(), unique_name())
    tune(module, samples(), batch_sizes=[1, 2], strategy=FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE))
    assert seen and not any(seen)


@pytest.mark.together  # what every installed plugin logs as it loads
def test_json_log_format_prints_one_object_per_line(tmp_path: Path):
    script = (
        "import torch, aitune_core as ait\n"
        "from aitune_core.tuning import tune\n"
        "from aitune_core.strategies import FirstWinsStrategy\n"
        "from aitune_core.backends import TorchEagerBackend\n"
        "from aitune_core.profiling import ProfileConfig\n"
        f"ait.config.cache_dir = {str(tmp_path)!r}\n"
        "m = ait.Module(torch.nn.Linear(4, 2).eval(), 'json-demo')\n"
        "p = ProfileConfig(min_time_s=0.001, max_time_s=0.01, max_batch_search=False)\n"
        "tune(m, [torch.randn(4) for _ in range(4)], batch_sizes=[1, 2],"
        " strategy=FirstWinsStrategy([TorchEagerBackend()], profile=p))\n"
    )
    env = {**os.environ, "AITUNE_LOG_FORMAT": "json"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    # torch may print its own warnings on stderr; every line aitune writes is one JSON object.
    lines = [line for line in result.stderr.splitlines() if line.startswith("{")]
    events = [json.loads(line) for line in lines]
    names = [event["event"] for event in events]
    assert "tune started" in names and "selected" in names and "Tuning summary" in names
    selected = next(event for event in events if event["event"] == "selected")
    assert selected["module"] == "json-demo" and selected["graph"] == "0" and selected["backend"]


def test_eager_serves_the_small_batches_where_it_measured_faster(unique_name, tmp_path: Path):
    """The winner at the largest batch (a fixed 3 ms per call) loses to eager (0.5 ms per
    sample) below batch 6: those calls run eagerly, larger ones go to the backend."""
    model = PerSampleCostMLP(per_sample_s=0.0).eval()
    module = ait.Module(model, unique_name())
    timer = ScriptedTimer({EAGER: lambda batch: 0.5e-3 * batch, "FixedCostBackend()": 3e-3})
    strategy = MaxThroughputStrategy([FixedCostBackend(delay_s=0.003)], profile=FAST_PROFILE, timer=timer)
    report = tune(module, samples(), batch_sizes=[1, 2, 4, 8, 16], strategy=strategy)
    (route,) = module.routes.values()
    assert isinstance(route.backend, FixedCostBackend)
    assert route.eager_up_to == 4
    (row,) = [c for c in report.graphs[0].candidates if c.status == "selected"]
    assert row.serves == [(5, 16)] and report.graphs[0].eager_serves == [(1, 4)]
    assert "batch 5-16" in report.summary() and "batch 1-4" in report.summary()
    calls = 0
    real_call = route.call

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return real_call(*args, **kwargs)

    route.call = counting
    model.per_sample_s = 0.0  # outputs only from here on
    for batch, expected_calls in ((1, 0), (4, 0), (5, 1), (16, 2)):
        x = torch.randn(batch, 16)
        torch.testing.assert_close(module(x), model(x))
        assert calls == expected_calls, batch
    path = ait.save(module, tmp_path / "ckpt")
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["modules"][0]["graphs"][0]["lower"] == [{"up_to": 4, "backend": None}]


def test_no_eager_routing_without_performance_validation(unique_name):
    module = ait.Module(PerSampleCostMLP(per_sample_s=0.0005).eval(), unique_name())
    strategy = MaxThroughputStrategy([FixedCostBackend(delay_s=0.003)], profile=FAST_PROFILE)
    strategy.enable_performance_validation(False)
    tune(module, samples(), batch_sizes=[1, 2, 4, 8, 16], strategy=strategy)
    (route,) = module.routes.values()
    assert route.eager_up_to is None
