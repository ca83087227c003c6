"""The static-cache recipe: the decode step with a fixed-length StaticCache, compiled once and routed on every step."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core import MaxThroughputStrategy, ProfileConfig

pytestmark = pytest.mark.together  # it compiles with aitune-inductor

transformers = pytest.importorskip("transformers")
aitune_inductor = pytest.importorskip("aitune_inductor", reason="the recipe compiles with aitune-inductor")

MAX_LENGTH = 24


def generate_static(model: Any, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding with a StaticCache: every decode step has the same shapes."""
    cache = transformers.StaticCache(config=model.config, max_cache_len=MAX_LENGTH)
    length = prompt.shape[1]
    with torch.no_grad():
        out = model(input_ids=prompt, past_key_values=cache, cache_position=torch.arange(length), use_cache=True)
        tokens = [prompt]
        for step in range(new_tokens):
            token = out.logits[:, -1:].argmax(-1)
            tokens.append(token)
            position = torch.tensor([length + step])
            out = model(input_ids=token, past_key_values=cache, cache_position=position, use_cache=True)
    return torch.cat(tokens, dim=1)


def test_the_static_decode_step_compiles_once_and_serves_every_step(tiny_gpt2, unique_name):
    model = tiny_gpt2(layers=1)
    module = ait.Module(model, unique_name())
    prompts = [torch.randint(0, 97, (6,)) for _ in range(3)]
    strategy = MaxThroughputStrategy(
        [aitune_inductor.TorchInductorJitBackend()], profile=ProfileConfig(max_batch_search=False)
    )
    report = ait.tune(lambda batch: generate_static(module, batch, 4), prompts, batch_sizes=[1], strategy=strategy)

    decode = [g for g in report.graphs if any(r.status == "selected" for r in g.candidates)]
    assert len(report.graphs) == 2 and len(decode) == 2, [
        (r.backend, r.status, r.reason) for g in report.graphs for r in g.candidates
    ]
    served = [module.backends[g.graph] for g in report.graphs]
    assert all(type(b).__name__ == "TorchInductorJitBackend" for b in served)

    from torch._dynamo.utils import counters

    prompt = torch.randint(0, 97, (1, 6))
    expected = generate_static(model, prompt, 12)
    compiled_before = counters["stats"]["unique_graphs"]
    got = generate_static(module, prompt, 12)
    assert torch.equal(got, expected)
    assert counters["stats"]["unique_graphs"] == compiled_before  # 12 decode steps, no new compile
