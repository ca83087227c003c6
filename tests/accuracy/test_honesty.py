"""What a budget must never do: change anything without one, serve lossy at a budget of 0, hide a broken
metric, or modify the user's model."""

from __future__ import annotations

import math

import pytest
import torch
from accuracy_helpers import names, negative_l1, served, shifted_model

import aitune_core as ait
from aitune_core.accuracy.heldout import split

SHIFTS = {"a": 0.0, "b": 0.02, "c": 0.0, "d": 1.0}
LATENCIES = {"a": 0.4e-3, "b": 0.3e-3, "c": 0.5e-3, "d": 0.1e-3}


def data(count: int = 20) -> list[torch.Tensor]:
    return [torch.randn(8) for _ in range(count)]


def routes(model: torch.nn.Module) -> dict[str, list[tuple[int, str]]]:
    """Every branch's serving backend and lower ranges, by name without the run suffix."""
    found = {}
    for module in model.branches:
        (route,) = module.routes.values()
        lower = [(up_to, backend.describe() if backend else "eager") for up_to, backend in route.lower]
        found[names([module.name])[0]] = [(0, route.backend.describe()), *lower]
    return found


def test_without_a_budget_nothing_changes() -> None:
    model, _ = shifted_model(SHIFTS, LATENCIES)
    report = ait.tune(model, data(), batch_sizes=[2, 4])
    assert report.accuracy is None and all(m.accuracy is None for m in model.branches)
    # Naming a lossy backend in a strategy opts in, as before, and tensor tolerances judge it: the
    # shifted outputs of b and d are rejected, the exact ones of a and c serve.
    assert served(model) == {
        "a": "ShiftBackend(tag='a')",
        "b": "TorchEagerBackend()",
        "c": "ShiftBackend(tag='c')",
        "d": "TorchEagerBackend()",
    }
    rejected = [c for g in report.graphs for c in g.candidates if c.backend.startswith("ShiftBackend(shift")]
    assert [c.stage for c in rejected] == ["validation", "validation"]
    assert "Accuracy budget" not in str(report)


def test_a_budget_of_zero_gives_exactly_the_lossless_routes() -> None:
    budgeted, _ = shifted_model(SHIFTS, LATENCIES, exact_s=0.7e-3)
    report = ait.tune(budgeted, data(), batch_sizes=[2, 4], accuracy=ait.AccuracyBudget(negative_l1, 0))
    lossless, _ = shifted_model(SHIFTS, LATENCIES, exact_s=0.7e-3, lossy=False)
    ait.tune(lossless, split(data(), ait.AccuracyBudget(negative_l1, 0))[0], batch_sizes=[2, 4])
    assert routes(budgeted) == routes(lossless)
    assert set(served(budgeted).values()) == {"ExactBackend()"}
    assert report.accuracy is not None and report.accuracy.chosen == [] and report.accuracy.sensitivities == []
    assert any("A budget of 0 allows no lossy backend" in note for note in report.accuracy.notes)
    assert report.accuracy.final_drop == pytest.approx(0.0, abs=1e-6)  # measured all the same


def test_the_user_model_is_never_modified() -> None:
    model, original = shifted_model(SHIFTS, LATENCIES, exact_s=0.7e-3)
    ait.tune(model, data(), batch_sizes=[2, 4], accuracy=ait.AccuracyBudget(negative_l1, 0.05))
    assert any(m.accuracy.lossy for m in model.branches)  # lossy backends served, and the weights stayed
    for wrapped, plain in zip(model.branches, original.branches, strict=True):
        assert not wrapped.module.training
        for (name, tensor), (_, expected) in zip(
            wrapped.module.state_dict().items(), plain.state_dict().items(), strict=True
        ):
            assert torch.equal(tensor, expected), name
    x = torch.randn(4, 8)
    with torch.no_grad():
        assert torch.equal(sum(m.module(x) for m in model.branches), original(x))


def test_the_metric_sees_eval_mode_no_grad_and_the_same_inputs_for_both() -> None:
    seen: list[tuple[bool, bool, tuple[int, ...]]] = []
    model, _ = shifted_model(SHIFTS, LATENCIES)

    def watching(outputs: torch.Tensor, reference: torch.Tensor) -> float:
        training = any(m.module.training for m in model.branches)
        seen.append((torch.is_grad_enabled(), training, tuple(outputs.shape)))
        assert outputs.shape == reference.shape
        return negative_l1(outputs, reference)

    ait.tune(model, data(), batch_sizes=[2, 4], accuracy=ait.AccuracyBudget(watching, 0.05))
    assert seen and all(not grad and not training for grad, training, _ in seen)
    assert {shape for _, _, shape in seen} == {(4, 4)}  # the 4 held-out samples, at batch 2 and at batch 4


@pytest.mark.parametrize(
    ("metric", "message"),
    [
        (lambda out, ref: 1 / 0, "raised ZeroDivisionError"),
        (lambda out, ref: math.nan, "returned nan"),
    ],
)
def test_a_broken_metric_stops_the_search_naming_it(metric, message) -> None:
    model, original = shifted_model(SHIFTS, LATENCIES)
    with pytest.raises(ait.AccuracyError, match=message) as raised:
        ait.tune(model, data(), batch_sizes=[2, 4], accuracy=ait.AccuracyBudget(metric, 0.05))
    assert "<lambda>" in str(raised.value) and "metric" in str(raised.value)
    assert all(m.state is ait.ModuleState.RECORDING and not m.routes for m in model.branches)
    x = torch.randn(2, 8)
    with torch.no_grad():
        assert torch.equal(model(x), original(x))


def test_the_held_out_data_is_a_fifth_of_the_dataset_unless_given() -> None:
    samples = [torch.full((2,), float(i)) for i in range(10)]
    kept, held = split(samples, ait.AccuracyBudget(ait.metrics.cosine, 0.01))
    assert [int(s[0]) for s in held.samples] == [4, 9] and len(kept) == 8
    assert "2 of the dataset's 10 samples" in held.note and len(held.fingerprint) == 16
    given = [torch.ones(2)]
    same, own = split(samples, ait.AccuracyBudget(ait.metrics.cosine, 0.01, data=given))
    assert same is samples and own.samples == given and own.fingerprint != held.fingerprint
    assert split(samples, ait.AccuracyBudget(ait.metrics.cosine, 0.01))[1].fingerprint == held.fingerprint


def test_a_budget_is_checked_when_made() -> None:
    with pytest.raises(ValueError, match="max_drop"):
        ait.AccuracyBudget(ait.metrics.cosine, -0.1)
    with pytest.raises(TypeError, match="callable"):
        ait.AccuracyBudget("top1", 0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="AccuracyBudget"):
        ait.tune(lambda x: x, [torch.ones(2)], accuracy=0.01)  # type: ignore[arg-type]
