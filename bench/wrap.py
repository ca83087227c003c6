"""Wrapping what ``inspect`` suggests against wrapping by hand.

A tiny-config BERT (transformers' ``BertModel``, random weights, nothing downloaded)
is inspected; the modules it suggests are wrapped with ``aitune_core.wrap`` in one
copy of the model, and the encoder is wrapped by hand (``Module(model.encoder, ...)``
set on the model) in another. Both are tuned the same way (Inductor JIT and eager,
MaxThroughputStrategy) on the same data, then timed against eager in alternating
rounds at batch 8, sequence 64. Reported: medians with p10 .. p90, each one's speedup
over eager, and what inspect suggested. ``python -m bench wrap`` runs it (needs
transformers and aitune-inductor; skipped, saying so, without them).
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
from typing import Any

import torch

from bench.timing import Options, Result, Stats, alternate, calibrate, median, per_call

BATCH = 8
LENGTH = 64
_names = itertools.count()


def _bert() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=1000,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=512,
    )
    return BertModel(config).eval()


def _data() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        {"input_ids": torch.randint(0, 1000, (LENGTH,), generator=generator), "attention_mask": torch.ones(LENGTH)}
        for _ in range(16)
    ]


def _tune(model: torch.nn.Module) -> None:
    from aitune_inductor import TorchInductorJitBackend

    import aitune_core as ait
    from aitune_core.profiling import ProfileConfig

    profile = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.02, max_time_s=0.1, max_batch_search=False)
    strategy = ait.MaxThroughputStrategy([TorchInductorJitBackend(), ait.TorchEagerBackend()], profile=profile)
    ait.tune(model, _data(), batch_sizes=[1, BATCH], strategy=strategy)


def run(options: Options) -> list[Result]:
    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("aitune_inductor") is None:
        print("wrap: skipped, it needs transformers and aitune-inductor")
        return []
    import aitune_core as ait

    torch.set_num_threads(options.threads)
    eager = _bert()
    report = ait.inspect(eager, _data(), batch_sizes=[BATCH], max_depth=2)
    suggested = report.suggest()
    by_suggestion = copy.deepcopy(eager)
    ait.wrap(by_suggestion, suggested, prefix=f"bench-wrap-{next(_names)}/")
    by_hand = copy.deepcopy(eager)
    by_hand.encoder = ait.Module(by_hand.encoder, f"bench-hand-{next(_names)}")
    _tune(by_suggestion)
    _tune(by_hand)

    call: dict[str, Any] = {
        "input_ids": torch.randint(0, 1000, (BATCH, LENGTH)),
        "attention_mask": torch.ones(BATCH, LENGTH),
    }
    with torch.no_grad():
        expected = eager(**call).last_hidden_state
        for variant in (by_suggestion, by_hand):
            torch.testing.assert_close(variant(**call).last_hidden_state, expected, rtol=1e-4, atol=1e-4)
        models = {"eager": eager, f"wrap({suggested})": by_suggestion, "encoder wrapped by hand": by_hand}
        variants = {}
        for name, model in models.items():
            number = calibrate(lambda model=model: model(**call))
            variants[name] = lambda model=model, number=number: per_call(lambda: model(**call), number)
        times = alternate(variants, rounds=options.rounds(15, 3))
    base = median(times["eager"])
    name = f"tiny BERT, batch {BATCH}, sequence {LENGTH}"
    return [
        Result(name, variant, Stats.of(values), unit="ms", note=f"{base / median(values):.2f}x vs eager")
        for variant, values in times.items()
    ]
