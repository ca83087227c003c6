"""Built-in metrics for :class:`~aitune_core.accuracy.AccuracyBudget`: ``metric(outputs, reference) -> float``.

Each scores what the tuned pipeline returned against what eager returned for the same
inputs, higher is better, and gives 1.0 for eager against itself. Outputs may be a
tensor, a tuple or list whose first item is the tensor, or anything with ``logits``
(a transformers ``ModelOutput`` or a dict).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def _tensor(value: Any, what: str) -> torch.Tensor:
    """The tensor a metric scores: the value itself, its ``logits``, or its first item."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, Mapping) and "logits" in value:
        return _tensor(value["logits"], what)
    logits = getattr(value, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(value, (tuple, list)) and value:
        return _tensor(value[0], what)
    raise TypeError(f"{what}: expected a tensor, a tuple starting with one, or an output with logits; got {value!r}")


def top1_agreement(outputs: Any, reference: Any) -> float:
    """The share of rows (samples, or tokens for ``[batch, tokens, classes]``) whose argmax matches eager's."""
    actual, expected = _tensor(outputs, "top1_agreement"), _tensor(reference, "top1_agreement")
    if actual.shape != expected.shape:
        raise ValueError(f"top1_agreement: outputs of shape {tuple(actual.shape)}, eager's {tuple(expected.shape)}")
    same = actual.argmax(dim=-1) == expected.argmax(dim=-1)
    return float(same.float().mean())


def cosine(outputs: Any, reference: Any) -> float:
    """The mean cosine similarity of each sample's outputs (flattened) with eager's."""
    actual, expected = _tensor(outputs, "cosine"), _tensor(reference, "cosine")
    if actual.shape != expected.shape:
        raise ValueError(f"cosine: outputs of shape {tuple(actual.shape)}, eager's {tuple(expected.shape)}")
    rows = max(1, actual.shape[0]) if actual.dim() > 0 else 1
    a = actual.detach().double().reshape(rows, -1)
    b = expected.detach().double().reshape(rows, -1)
    return float(torch.nn.functional.cosine_similarity(a, b, dim=1, eps=1e-12).mean())


def token_agreement(outputs: Any, reference: Any) -> float:
    """The share of generated tokens equal to eager's, position by position.

    Integer tensors are token ids (``[batch, length]``); floating ones are logits, whose
    argmax is the token. Positions beyond the shorter sequence count as disagreeing, so
    a generation that stops early or runs long costs what it changes.
    """
    actual, expected = _tensor(outputs, "token_agreement"), _tensor(reference, "token_agreement")
    actual, expected = _tokens(actual), _tokens(expected)
    if actual.dim() == 1:
        actual, expected = actual.unsqueeze(0), expected.unsqueeze(0)
    if actual.shape[:-1] != expected.shape[:-1]:
        raise ValueError(f"token_agreement: {tuple(actual.shape)} tokens against eager's {tuple(expected.shape)}")
    shared = min(actual.shape[-1], expected.shape[-1])
    longest = max(actual.shape[-1], expected.shape[-1])
    if longest == 0:
        return 1.0
    same = (actual[..., :shared] == expected[..., :shared]).sum()
    return float(same) / float(expected[..., :1].numel() * longest)


def _tokens(value: torch.Tensor) -> torch.Tensor:
    return value.argmax(dim=-1) if value.is_floating_point() else value
