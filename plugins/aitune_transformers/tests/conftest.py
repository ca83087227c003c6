"""Tiny language models from configs (random weights, no hub); the root conftest gives each test a clean config."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
try:
    import transformers
except ImportError:  # each test module skips with the reason; the conftest must still load
    transformers = None


@pytest.fixture
def tiny_gpt2() -> Callable[..., Any]:
    return make_gpt2


@pytest.fixture
def greedy() -> Callable[..., torch.Tensor]:
    return greedy_tokens


def make_gpt2(layers: int = 2) -> Any:
    config = transformers.GPT2Config(
        n_layer=layers, n_embd=32, n_head=2, vocab_size=97, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config).eval()  # type: ignore[union-attr]


def greedy_tokens(model: Any, prompt: torch.Tensor, new_tokens: int, cache: Any = None) -> torch.Tensor:
    """Greedy decoding by hand: a prefill call, then one decode call per token, the cache passed along."""
    with torch.no_grad():
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
        tokens = [prompt]
        for _ in range(new_tokens):
            token = out.logits[:, -1:].argmax(-1)
            tokens.append(token)
            out = model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
    return torch.cat(tokens, dim=1)
