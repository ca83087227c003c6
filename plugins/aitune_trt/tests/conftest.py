"""Fixtures of the plugin's tests beside the shared ones (:mod:`aitune_core.testing.recorded`).

Graphs are recorded once per module; exports (about half a second each here) happen
only in the tests that need an ONNX file.
"""

from __future__ import annotations

import pytest

from aitune_trt.testing import OrtTensorRTBackend


@pytest.fixture(autouse=True)
def _count_from_zero() -> None:
    OrtTensorRTBackend.plans_built = 0
    OrtTensorRTBackend.engines_opened = 0
