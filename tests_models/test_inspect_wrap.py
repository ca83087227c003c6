"""inspect and wrap on transformers' BERT: the encoder is what to wrap, and wrapping it tunes it.

Time is counted in floating-point operations (torch's ``FlopCounterMode``) rather than
read off the wall clock, so which module holds the most of it does not depend on the
machine's load.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from model_cases import build_bert

import aitune_core as ait

pytest.importorskip("transformers")


def _data() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        {"input_ids": torch.randint(0, 100, (16,), generator=generator), "attention_mask": torch.ones(16)}
        for _ in range(4)
    ]


def test_inspect_suggests_the_encoder_and_wrap_tunes_it(unique_name: Callable[[str], str]) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    model = build_bert(0)
    with FlopCounterMode(display=False) as flops:
        report = ait.inspect(model, _data(), batch_sizes=[2], max_depth=2, clock=lambda: flops.get_total_flops())
    rows = {row.path: row for row in report.rows}
    assert rows["encoder"].share > 0.8
    assert report.suggest() == ["encoder"]

    (encoder,) = ait.wrap(model, report.suggest(), prefix=unique_name("bert") + "/")
    assert model.encoder is encoder
    ait.tune(model, _data(), batch_sizes=[1, 2], strategy=ait.FirstWinsStrategy([ait.TorchEagerBackend()]))
    assert encoder.state is ait.ModuleState.TUNED
    ait.unwrap(model)
    assert not isinstance(model.encoder, ait.Module)
