"""Declared ranges on the transformer encoder: the IR takes them as bounded dims, and serves them all.

Recorded at batch 2 and lengths 16, 32 and 64; declared batch up to 8 and length 2 to
512. The IR's inputs are ``[1..8,2..512]``, calls far from the recorded shapes are
served by OpenVINO with eager's answers, and a call past the range is refused by the
route before it reaches the backend.
"""

from __future__ import annotations

import pytest
import torch
from openvino_helpers import served_by, tune_alone

import aitune_core as ait
from aitune_core.testing.models import TinyEncoder, encoder_call
from aitune_openvino import OpenVINOBackend

pytestmark = pytest.mark.slow


def test_the_encoder_serves_its_declared_range() -> None:
    torch.manual_seed(0)
    model = TinyEncoder().eval()
    dims = {0: ait.BatchDim(max=8), 1: ait.DynamicDim("seq", min=2, max=512, opt=128)}
    wrapped, _ = tune_alone(
        model,
        [encoder_call(2, length)[1] for length in (16, 32, 64)],
        dynamic_shapes={"input_ids": dims, "attention_mask": dims},
    )
    (backend,) = served_by(wrapped)
    assert isinstance(backend, OpenVINOBackend) and backend.compiled is not None
    shapes = [str(port.get_partial_shape()) for port in backend.compiled.compiled.inputs]
    assert shapes == ["[1..8,2..512]", "[1..8,2..512]"]
    assert backend.build_info["converter"] == "export" and "fallback_reason" not in backend.build_info

    ait.config.fallback = "raise"  # a call the route does not give to the backend raises
    run = backend.inference_callable()
    with torch.no_grad():
        for batch, length in ((2, 24), (1, 300), (8, 512), (5, 2)):
            _, kwargs = encoder_call(batch, length)
            expected = model(**kwargs)
            torch.testing.assert_close(wrapped(**kwargs), expected)  # float32's defaults: rtol 1.3e-6, atol 1e-5
            torch.testing.assert_close(run(**kwargs), expected)
    with pytest.raises(ait.UnsupportedCallError, match="outside the tuned range"):
        wrapped(**encoder_call(2, 513)[1])
