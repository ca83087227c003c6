"""The search under a budget, with drops known exactly and timings scripted (no wall clock).

Each module's lossy candidate shifts its output by a known amount; the pipeline sums the
modules' outputs and the metric is the negative mean absolute difference, so any set of
lossy modules drops the metric by the sum of their shifts.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from accuracy_helpers import names, negative_l1, served, shifted_model

import aitune_core as ait
from aitune_core.accuracy.search import Option, greedy_order

SHIFTS = {"a": 0.0, "b": 0.0, "c": 0.05, "e": 0.06, "d": 1.0}
LATENCIES = {"a": 0.8e-3, "b": 0.5e-3, "c": 0.5e-3, "e": 0.6e-3, "d": 0.1e-3}
"""Against eager's 1 ms: b and c save 0.5 ms, e 0.4, a 0.2 and d, which breaks the metric, 0.9."""


def data(count: int = 20) -> list[torch.Tensor]:
    return [torch.randn(8) for _ in range(count)]


def test_modules_are_added_best_gain_per_drop_first_and_kept_while_the_pipeline_fits() -> None:
    model, _ = shifted_model(SHIFTS, LATENCIES)
    report = ait.tune(model, data(), batch_sizes=[2, 4], accuracy=ait.AccuracyBudget(negative_l1, 0.1))
    accuracy = report.accuracy
    assert accuracy is not None
    combined = [t for t in accuracy.trials if t.kind == "combination"]
    # Free ones first (the larger saving first), then c (0.5 ms for 0.05), then e (0.4 ms for 0.06), which
    # alone fits but not on top of c; d is never combined: alone it drops 1.0.
    assert [t.label.split()[-1].rsplit("-", 1)[0] for t in combined] == ["b", "a", "c", "e"]
    assert [t.kept for t in combined] == [True, True, True, False]
    assert combined[-1].drop == pytest.approx(0.11, abs=1e-5)
    assert sorted(names(accuracy.chosen)) == ["a", "b", "c"]
    assert accuracy.final_drop == pytest.approx(0.05, abs=1e-5) and accuracy.final_drop <= 0.1
    sensitivity = {names([row.module])[0]: row for row in accuracy.sensitivities}
    assert {k: round(r.drop or 0, 4) for k, r in sensitivity.items()} == {k: v for k, v in SHIFTS.items()}
    assert sensitivity["d"].speedup == pytest.approx(10.0) and not sensitivity["d"].chosen
    assert "alone it drops 1 > 0.1" in sensitivity["d"].note
    assert served(model) == {
        "a": "ShiftBackend(tag='a')",
        "b": "ShiftBackend(tag='b')",
        "c": "ShiftBackend(shift=0.05,tag='c')",
        "e": "TorchEagerBackend()",
        "d": "TorchEagerBackend()",
    }
    x = torch.randn(3, 8)
    with torch.no_grad():
        eager = sum(m.module(x) for m in model.branches)
        assert (model(x) - eager).abs().mean().item() == pytest.approx(0.05, abs=1e-5)


def test_the_report_carries_the_table_the_front_and_the_result() -> None:
    model, _ = shifted_model(SHIFTS, LATENCIES)
    report = ait.tune(model, data(), batch_sizes=[2, 4], accuracy=ait.AccuracyBudget(negative_l1, 0.1))
    accuracy = report.accuracy
    assert accuracy is not None
    text = str(report)
    assert "Sensitivity, each module lossy alone" in text and "Pareto front" in text
    assert "negative_l1 may drop by at most 0.1" in text and "4 of the dataset's 20 samples" in text
    assert "held-out drop 0.05" in accuracy.outcome()
    front = accuracy.pareto()
    assert front == sorted(front, key=lambda t: t.speedup)
    for point in front:  # nothing tried is both faster and closer to eager
        assert not any(o.speedup > point.speedup and o.drop < point.drop for o in accuracy.trials)
    data_out = json.loads(json.dumps(accuracy.to_dict()))
    assert data_out["metric"] == "negative_l1" and data_out["max_drop"] == 0.1
    assert len(data_out["sensitivities"]) == 5 and len(data_out["pareto"]) == len(front)
    assert data_out["final_speedup"] == pytest.approx(accuracy.final_speedup)


def test_greedy_order_puts_free_gains_first_then_the_best_gain_per_drop() -> None:
    options = [Option("slow", 1.0, 0.9, ()), Option("free", 1.0, 0.8, ()), Option("big", 1.0, 0.2, ())]
    drops = {"slow": 0.01, "free": -0.001, "big": 0.2}  # a metric that improves counts as no drop
    assert [o.module for o in greedy_order(options, drops)] == ["free", "slow", "big"]
    assert Option("x", 2.0, 0.5, ()).speedup == 4.0 and math.isinf(Option("x", 1.0, 0.0, ()).speedup)


def test_a_budget_no_lossy_candidate_fits_gives_the_lossless_result_and_says_so() -> None:
    model, _ = shifted_model({"c": 0.05, "d": 1.0}, {"c": 0.5e-3, "d": 0.1e-3})
    report = ait.tune(model, data(), batch_sizes=[2, 4], accuracy=ait.AccuracyBudget(negative_l1, 0.01))
    assert report.accuracy is not None and report.accuracy.chosen == []
    assert set(served(model).values()) == {"TorchEagerBackend()"}
    assert "No lossy candidate fits the budget of 0.01" in str(report)
    assert "the lossless routes serve" in report.accuracy.outcome()


def test_the_profiling_cap_stops_the_search_and_the_summary_says_so() -> None:
    ait.config.profile_cap_s = 0.01  # spent by the first comparisons, so no module is measured
    model, _ = shifted_model(SHIFTS, LATENCIES)
    report = ait.tune(model, data(), batch_sizes=[2, 4], accuracy=ait.AccuracyBudget(negative_l1, 0.1))
    assert report.accuracy is not None and report.accuracy.chosen == []
    assert any("profiling cap" in note for note in report.accuracy.notes)
    assert all(row.note == "not measured" for row in report.accuracy.sensitivities)
