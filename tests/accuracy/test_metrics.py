"""The built-in metrics: 1.0 for eager against itself, and what each counts."""

from __future__ import annotations

import pytest
import torch

import aitune_core as ait


def test_top1_agreement_counts_rows_whose_argmax_matches() -> None:
    reference = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
    flipped = reference.clone()
    flipped[0] = torch.tensor([1.0, 0.0])
    assert ait.metrics.top1_agreement(reference, reference) == 1.0
    assert ait.metrics.top1_agreement(flipped, reference) == 0.75
    assert ait.metrics.top1_agreement((flipped,), {"logits": reference}) == 0.75
    with pytest.raises(ValueError, match="shape"):
        ait.metrics.top1_agreement(reference[:2], reference)


def test_cosine_is_one_for_equal_outputs_and_scale_free() -> None:
    reference = torch.randn(5, 3, 4)
    assert ait.metrics.cosine(reference, reference) == pytest.approx(1.0)
    assert ait.metrics.cosine(reference * 3, reference) == pytest.approx(1.0)
    assert ait.metrics.cosine(-reference, reference) == pytest.approx(-1.0)


def test_token_agreement_counts_positions_and_length() -> None:
    reference = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert ait.metrics.token_agreement(reference, reference) == 1.0
    changed = reference.clone()
    changed[1, 3] = 0
    assert ait.metrics.token_agreement(changed, reference) == 7 / 8
    assert ait.metrics.token_agreement(reference[:, :2], reference) == 4 / 8  # stopped early
    logits = torch.nn.functional.one_hot(reference, 10).float()
    assert ait.metrics.token_agreement(logits, reference) == 1.0


def test_metric_names_say_where_they_come_from() -> None:
    assert ait.AccuracyBudget(ait.metrics.top1_agreement, 0.01).metric_name == "ait.metrics.top1_agreement"

    def mine(outputs: torch.Tensor, reference: torch.Tensor) -> float:
        return 1.0

    assert ait.AccuracyBudget(mine, 0.01).metric_name.endswith("mine")
