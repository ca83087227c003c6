"""``model(x)`` returning one tensor reaches ONNX Runtime without flattening the call or rebuilding its output.

At batch 1 a small model's session call is 0.1-0.2 ms, and those layers of Python
showed in the benchmarks; the shorter call must give exactly what the full one gives,
and every other form of call must still take the full one.
"""

from __future__ import annotations

import gc
import itertools
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.exported import refuse_flattening
from aitune_core.testing.models import Positive, TinyMLP
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_onnx import ONNXRuntimeBackend

_names = itertools.count()


def tuned(model: torch.nn.Module, features: int) -> tuple[ait.Module, ONNXRuntimeBackend]:
    wrapped = ait.Module(model, f"onnx-one-tensor-{next(_names)}")
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    ait.tune(wrapped, [torch.randn(features) for _ in range(4)], batch_sizes=[1, 4], strategy=strategy)
    (route,) = wrapped.routes.values()
    assert isinstance(route.backend, ONNXRuntimeBackend)
    return wrapped, route.backend


def test_a_lone_tensor_skips_flattening_and_gives_the_same_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    model = TinyMLP().eval()
    wrapped, backend = tuned(model, 8)
    inputs = [torch.randn(batch, 8) for batch in (1, 3, 4)]
    inputs.append(torch.randn(8, 4).t())  # not contiguous
    with torch.no_grad():
        full = [backend(x) for x in inputs]
        refuse_flattening(monkeypatch, backend)
        for x, expected in zip(inputs, full, strict=True):
            assert torch.equal(wrapped(x), expected)
            torch.testing.assert_close(wrapped(x), model(x), rtol=1e-4, atol=1e-5)
        assert torch.equal(wrapped(x=inputs[0]), full[0])  # bound as the forward takes it: by position
        with pytest.raises(AssertionError, match="flattened"):
            backend.inference_callable()(x=inputs[0])  # a keyword call on its own takes the full path
    needs_grad = inputs[0].clone().requires_grad_()  # with grad on, numpy() refuses it undetached
    assert torch.equal(backend.inference_callable()(needs_grad), full[0])


def test_a_graph_with_two_outputs_keeps_the_full_path() -> None:
    model = Positive().eval()
    wrapped, backend = tuned(model, 6)
    assert backend.inference_callable() == backend._infer
    x = torch.randn(3, 6)
    with torch.no_grad():
        for got, want in zip(wrapped(x), model(x), strict=True):
            torch.testing.assert_close(got, want)


def test_a_restored_backend_takes_the_short_call_too(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = TinyMLP().eval()
    wrapped, _ = tuned(model, 8)
    checkpoint, name = ait.save(wrapped, tmp_path / "checkpoint"), wrapped.name
    del wrapped
    gc.collect()  # the name is free again once the tuned wrapper is gone
    loaded = ait.Module(TinyMLP().eval(), name)
    ait.load(loaded, checkpoint)
    (route,) = loaded.routes.values()
    refuse_flattening(monkeypatch, route.backend)
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=1e-4, atol=1e-5)
