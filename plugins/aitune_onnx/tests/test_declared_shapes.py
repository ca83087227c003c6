"""A declared sequence range on a BERT-style encoder, exported to ONNX and run by ONNX Runtime.

Recorded at lengths 16, 32 and 64 and declared 1 to 512: the export gets that range,
calls at 8, 300 and 512 are served by ONNX Runtime and match eager, and 513 is refused
by the route (it would run eagerly under the default fallback).
"""

from __future__ import annotations

import itertools

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.models import TinyEncoder, encoder_call
from aitune_core.testing.timing import SHORT_PROFILE
from aitune_onnx import ONNXRuntimeBackend

pytestmark = pytest.mark.slow

_names = itertools.count()


def test_onnx_runtime_serves_the_declared_range() -> None:
    model = TinyEncoder().eval()
    seq = ait.DynamicDim("seq", min=1, max=512, opt=128)
    wrapped = ait.Module(model, f"onnx-declared-{next(_names)}", dynamic_shapes={"input_ids": {1: seq}})
    strategy = ait.OneBackendStrategy(ONNXRuntimeBackend(), profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)
    ait.tune(wrapped, [encoder_call(2, length)[1] for length in (16, 32, 64)], strategy=strategy)
    backend = wrapped.backends["0"]
    assert isinstance(backend, ONNXRuntimeBackend)

    ait.config.fallback = "raise"  # a call not routed to the backend raises
    run = backend.inference_callable()
    with torch.no_grad():
        for length in (8, 300, 512):
            _, kwargs = encoder_call(2, length)
            torch.testing.assert_close(wrapped(**kwargs), model(**kwargs), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(run(**kwargs), model(**kwargs), rtol=1e-4, atol=1e-4)
    with pytest.raises(ait.UnsupportedCallError, match="outside the tuned range"):
        wrapped(**encoder_call(2, 513)[1])
