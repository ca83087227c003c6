"""LoRA adapters on a tuned model: ONNX Runtime serves each adapter's weights once the module is refitted.

A tiny BERT (random weights, nothing from a hub) gets PEFT LoRA adapters on its attention
projections and is tuned on ONNX Runtime, whose session holds its own copy of every
weight. New adapter weights of the same rank written into the active adapter are a refit;
switching the active adapter (``set_adapter``) writes no tensor, so ``ait.refit`` is called
for it, and the session, which computes with the other adapter's tensors, is rebuilt.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.testing.models import TinyBertClassifier
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_onnx import ONNXRuntimeBackend

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

pytestmark = pytest.mark.slow

VOCAB, LENGTH, RANK = TinyBertClassifier.VOCAB, 8, 4
_names = itertools.count()


def lora_config() -> Any:
    # init_lora_weights=False: random B matrices, so that every adapter changes the answers
    return peft.LoraConfig(r=RANK, lora_alpha=8, target_modules=["query", "value"], init_lora_weights=False)


def adapter_weights(peft_model: Any, seed: int) -> dict[str, torch.Tensor]:
    """Another adapter of the same rank on the same modules: what a trained adapter file holds."""
    generator = torch.Generator().manual_seed(seed)
    current = peft.get_peft_model_state_dict(peft_model, adapter_name="first")
    return {name: torch.randn(tensor.shape, generator=generator) * 0.5 for name, tensor in current.items()}


@pytest.fixture
def tuned(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, nn.Module, ait.Module]]:
    # The refits here are the explicit ones, not a background refit racing them.
    monkeypatch.setattr(ait.config, "on_weight_change", "eager")
    torch.manual_seed(0)
    model = TinyBertClassifier().eval()
    peft_model = peft.get_peft_model(model, lora_config(), adapter_name="first")
    peft_model.add_adapter("second", lora_config())
    peft_model.set_adapter("first")
    peft_model.eval()
    assert peft_model.base_model.model is model  # the LoRA layers are injected into the model itself
    wrapped = ait.Module(model, f"lora-{next(_names)}")
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    ait.tune(wrapped, [torch.randint(0, VOCAB, (LENGTH,)) for _ in range(4)], batch_sizes=[1, 4], strategy=strategy)
    (route,) = wrapped.routes.values()
    assert isinstance(route.backend, ONNXRuntimeBackend)
    yield peft_model, model, wrapped


def served_by_the_session(wrapped: ait.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """What the tuned route's ONNX Runtime session itself answers, with no eager stand-in."""
    (route,) = wrapped.routes.values()
    assert isinstance(route.backend, ONNXRuntimeBackend)
    with torch.no_grad():
        answer: torch.Tensor = route.backend(input_ids)
    return answer


def test_same_rank_adapter_weights_are_refitted_into_the_session(tuned: tuple[Any, nn.Module, ait.Module]) -> None:
    peft_model, model, wrapped = tuned
    input_ids = torch.randint(0, VOCAB, (3, LENGTH))
    with torch.no_grad():
        previous = model(input_ids)
    for seed in (1, 2, 3):
        peft.set_peft_model_state_dict(peft_model, adapter_weights(peft_model, seed), adapter_name="first")
        with torch.no_grad():
            expected = model(input_ids)
        assert (expected - previous).abs().max() > 1e-2, "each adapter changes the answers: a stale one would show"

        report = ait.refit(wrapped)

        assert [row.outcome for row in report.routes] == ["refitted"], str(report)
        torch.testing.assert_close(served_by_the_session(wrapped, input_ids), expected, rtol=1e-4, atol=1e-5)
        with torch.no_grad():
            torch.testing.assert_close(wrapped(input_ids), expected, rtol=1e-4, atol=1e-5)
        previous = expected


def test_switching_the_active_adapter_rebuilds_the_session(tuned: tuple[Any, nn.Module, ait.Module]) -> None:
    peft_model, model, wrapped = tuned
    input_ids = torch.randint(0, VOCAB, (3, LENGTH))
    with torch.no_grad():
        with_a = model(input_ids)
        peft_model.set_adapter("second")
        with_b = model(input_ids)
    assert (with_b - with_a).abs().max() > 1e-2
    torch.testing.assert_close(served_by_the_session(wrapped, input_ids), with_a, rtol=1e-4, atol=1e-5)  # stale

    report = ait.refit(wrapped)

    # The session's initializers are adapter a's tensors: refitting copies them again, validation
    # against eager (adapter b) refuses the result, and the rebuild exports the graph with b.
    (row,) = report.routes
    assert row.outcome == "rebuilt", str(report)
    assert "validation" in row.reason, str(report)
    torch.testing.assert_close(served_by_the_session(wrapped, input_ids), with_b, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(input_ids), with_b, rtol=1e-4, atol=1e-5)
