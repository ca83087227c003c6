"""tune() rejects backends that are wrong only where the old validation did not look.

Each backend here was selected and served before: validation then made two calls, the
first stored sample and the max shape, on inputs shared by every candidate.
"""

from __future__ import annotations

import torch
from validation_backends import (
    MLP,
    QUICK_PROFILE,
    CenteredMLP,
    Correct,
    HalfWrong,
    NegatesInput,
    StaleCache,
    WrongAtBatch2And4,
    WrongOffPowersOfTwo,
)

import aitune_core as ait
from aitune_core.backends import Backend, TorchEagerBackend
from aitune_core.log import capture
from aitune_core.reporting.summary import TuneReport
from aitune_core.strategies import MaxThroughputStrategy
from aitune_core.tuning import tune


def samples(count: int = 8) -> list[torch.Tensor]:
    return [torch.randn(16) for _ in range(count)]


def tune_with(
    candidate: Backend, batch_sizes: list[int], name: str, model: torch.nn.Module | None = None, data=None
) -> tuple[ait.Module, TuneReport]:
    module = ait.Module((model or MLP()).eval(), name)
    strategy = MaxThroughputStrategy([candidate, TorchEagerBackend()], profile=QUICK_PROFILE)
    report = tune(module, data if data is not None else samples(), batch_sizes=batch_sizes, strategy=strategy)
    return module, report


def assert_rejected_and_eager_serves(module: ait.Module, report: TuneReport) -> str:
    bad, eager = report.graphs[0].candidates
    assert bad.status == "rejected" and bad.stage == "validation", bad.reason
    assert eager.status == "selected", eager.reason
    assert isinstance(module.backends["0"], TorchEagerBackend)
    return bad.reason


def test_a_backend_wrong_only_at_user_batch_sizes_2_and_4_is_rejected(unique_name):
    module, report = tune_with(WrongAtBatch2And4(), [1, 2, 4, 8], unique_name())
    reason = assert_rejected_and_eager_serves(module, report)
    assert reason.startswith("at batch 2, sample ") and "first call" in reason
    assert "max abs error" in reason and "allowed atol=" in reason


def test_a_backend_wrong_strictly_inside_the_range_is_rejected(unique_name):
    module, report = tune_with(WrongOffPowersOfTwo(), [1, 8], unique_name())
    reason = assert_rejected_and_eager_serves(module, report)
    assert reason.startswith("at batch 3, sample ")


def test_a_stale_per_shape_output_cache_is_rejected_on_the_second_call(unique_name):
    module, report = tune_with(StaleCache(), [1, 2, 4, 8], unique_name())
    reason = assert_rejected_and_eager_serves(module, report)
    assert reason.startswith("at batch 1, sample 0, second call: ")


def test_a_backend_negating_its_input_is_rejected_and_eager_still_passes(unique_name):
    module, report = tune_with(NegatesInput(), [1, 2, 4, 8], unique_name())
    reason = assert_rejected_and_eager_serves(module, report)
    assert "input `x` was changed in place" in reason
    x = torch.randn(3, 16)
    torch.testing.assert_close(module(x), module.module(x))


def test_a_nan_in_the_first_sample_does_not_let_a_half_wrong_backend_through(unique_name):
    data = samples()
    data[0][3] = float("nan")  # eager's outputs for every call holding this row are all NaN
    module, report = tune_with(HalfWrong(), [1, 2], unique_name(), model=CenteredMLP(), data=data)
    reason = assert_rejected_and_eager_serves(module, report)
    assert reason.startswith("at batch 1, sample ") and "`output` differs from eager: max abs error" in reason


def test_a_correct_backend_passes_at_every_batch_size_and_serves(unique_name):
    with capture() as events:
        _module, report = tune_with(Correct(), [1, 2, 4, 8], unique_name())
    correct, _eager = report.graphs[0].candidates
    assert correct.status in ("selected", "passed"), correct.reason
    (validated,) = [e for e in events if e["event"] == "validated" and e.get("backend") == "Correct()"]
    checked = validated["checked"].split("; ")
    for batch in (1, 2, 3, 4, 7, 8):
        assert any(label.startswith(f"batch {batch}, ") for label in checked), (batch, checked)
    assert sum(label.startswith("batch 1, ") for label in checked) == 4, "every stored sample is checked"
    assert validated["calls"] == 2 * len(checked), "every point is called twice"


def test_eager_that_is_never_finite_still_compares_positions_and_says_so(unique_name):
    model = MLP()
    with torch.no_grad():
        model.down.bias[0] = float("nan")  # output column 0 is NaN for every input
    with capture() as events:
        module, report = tune_with(Correct(), [1, 2], unique_name(), model=model)
    assert report.graphs[0].candidates[0].status in ("selected", "passed")
    warnings = [e for e in events if e["event"] == "weak validation reference"]
    assert len(warnings) == 1 and "NaN or infinite outputs at every validation point" in warnings[0]["note"]

    model = MLP()
    with torch.no_grad():
        model.down.bias[0] = float("nan")
    module, report = tune_with(HalfWrong(), [1, 2], unique_name(), model=model)
    reason = assert_rejected_and_eager_serves(module, report)
    assert "`output` differs from eager: max abs error" in reason
    assert "NaN or infinite outputs at every validation point" in reason


def test_tuning_data_whose_eager_outputs_are_all_nan_rejects_every_candidate_naming_the_fix(unique_name):
    data = samples()
    for sample in data:
        sample[3] = float("nan")  # every call holds a NaN row, so all of eager's outputs are NaN
    module, report = tune_with(HalfWrong(), [1, 2], unique_name(), model=CenteredMLP(), data=data)
    half_wrong = report.graphs[0].candidates[0]
    assert half_wrong.status == "rejected" and half_wrong.stage == "validation"
    assert half_wrong.reason.startswith(f"eager's outputs of graph 0 of module `{module.name}` are all NaN or infinite")
    assert "tune with data that gives finite outputs" in half_wrong.reason
    assert isinstance(module.backends["0"], TorchEagerBackend)
    x = torch.randn(3, 16)
    torch.testing.assert_close(module(x), module.module(x))
