"""Which ONNX Runtime configs change the numbers on purpose (``Backend.lossy``); nothing is built."""

from __future__ import annotations

import pytest

from aitune_onnx import ONNXRuntimeBackend


@pytest.mark.parametrize(
    ("settings", "lossy"),
    [
        ({}, False),
        ({"provider": "cuda"}, True),  # ONNX Runtime's CUDA provider uses TF32 unless told not to
        ({"provider": "cuda", "provider_options": {"use_tf32": "0"}}, False),
        ({"provider": "cuda", "provider_options": {"use_tf32": False}}, False),
        ({"provider": "cuda", "provider_options": {"use_tf32": "1"}}, True),
        ({"provider": "tensorrt"}, True),
        ({"provider": "tensorrt", "provider_options": {"trt_fp16_enable": "1"}}, True),
    ],
)
def test_reduced_precision_is_lossy(settings: dict[str, object], lossy: bool) -> None:
    assert ONNXRuntimeBackend(**settings).lossy is lossy
