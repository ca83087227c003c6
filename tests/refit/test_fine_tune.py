"""Fine-tuning a tuned BERT, then serving it: no call is ever answered with the weights from before the steps."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from refit_backends import CopyBackend
from refit_helpers import WAIT_S, tune_with
from torch import nn

import aitune_core as ait
from aitune_core.testing.models import TinyBertClassifier

transformers = pytest.importorskip("transformers")

Name = Callable[[str], str]
VOCAB, LENGTH, STEPS = TinyBertClassifier.VOCAB, 8, 10


def tokens(batch: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, LENGTH))


def test_fine_tuning_then_serving_answers_every_call_with_the_new_weights(unique_name: Name) -> None:
    assert ait.config.on_weight_change == "refit"
    model = TinyBertClassifier().eval()
    wrapped = ait.Module(model, unique_name("bert"))
    backend = tune_with(wrapped, CopyBackend(), [torch.randint(0, VOCAB, (LENGTH,)) for _ in range(4)])
    before = copy.deepcopy(model)

    wrapped.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(wrapped(tokens(4)), torch.randint(0, 2, (4,)))
        loss.backward()
        optimizer.step()
    wrapped.eval()

    served_by_backend = 0
    for call in range(30):
        x = tokens(1 + call % 4)
        calls = backend.calls
        with torch.no_grad():
            got, now, old = wrapped(x), model(x), before(x)
        assert (now - old).abs().max() > 1e-2, "the steps must change the answers, or old ones could not show"
        torch.testing.assert_close(got, now, msg=lambda m, call=call: f"call {call}: {m}")
        served_by_backend += backend.calls - calls
        if call == 20:
            report = ait.wait_for_refit(wrapped, timeout=WAIT_S)
            assert report is not None and [row.outcome for row in report.routes] == ["refitted"], str(report)
    assert backend.refits >= 1
    assert served_by_backend >= 9, "the refitted routes serve the calls after the refit"
