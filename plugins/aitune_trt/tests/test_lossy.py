"""Which TensorRT configs change the numbers on purpose (``Backend.lossy``); nothing here needs TensorRT."""

from __future__ import annotations

import pytest

from aitune_trt import TensorRTBackend


@pytest.mark.parametrize(
    ("settings", "lossy"),
    [
        ({}, False),
        ({"precision": "fp16"}, True),
        ({"precision": "bf16"}, True),
        ({"tf32": True}, True),
    ],
)
def test_reduced_precision_is_lossy(settings: dict[str, object], lossy: bool) -> None:
    assert TensorRTBackend(**settings).lossy is lossy
