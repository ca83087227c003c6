"""aitune's conformance suite on the default backend, on each of the tests' small models.

The tolerances are torch.testing.assert_close's float32 defaults (rtol 1.3e-6, atol
1e-5), tighter than what tuning validates with: float32 inference precision is pinned,
so what OpenVINO computes differs from eager only by the order of its operations.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from aitune_core.testing import BackendConformance
from aitune_core.testing.models import (
    KeywordsAndDynamicAxisCalls,
    Nested,
    TinyCNN,
    TinyEncoder,
    cnn_call,
    encoder_call,
    nested_call,
)
from aitune_openvino import OpenVINOBackend

pytestmark = pytest.mark.slow  # a conversion per test, about 200 of them: once, in tests_plugin


class TestOpenVINOConformance(BackendConformance):
    """The suite's own small MLP, through torch.export."""

    batch_sizes = (1, 2, 4)

    def make_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend()

    def make_other_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend(performance_hint="throughput")


class TestTracedConformance(BackendConformance):
    """The same, converted by tracing: the fallback route, on its own."""

    batch_sizes = (1, 2, 4)

    def make_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend(converter="trace")

    def make_other_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend(converter="trace", num_threads=1)


class TestCNNConformance(BackendConformance):
    batch_sizes = (1, 3, 4)

    def make_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend()

    def make_other_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend(num_threads=1)

    def make_model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return TinyCNN().eval()

    def make_inputs(self, batch_size: int) -> Any:
        return cnn_call(batch_size)[0]


class TestEncoderConformance(BackendConformance):
    """The transformer encoder, called with keywords, its sequence length growing with the batch."""

    batch_sizes = (1, 2, 4)

    def make_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend()

    def make_other_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend(performance_hint="auto")

    def make_model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return TinyEncoder().eval()

    def make_inputs(self, batch_size: int) -> Any:
        return encoder_call(batch_size, 6 + 4 * batch_size)[1]


class TestNestedConformance(BackendConformance):
    """Tuple and dict inputs, a float and a flag baked in, dict and tuple outputs beside a string."""

    batch_sizes = (2, 3, 6)

    def make_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend()

    def make_other_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend(trace_fallback=False)

    def make_model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return Nested().eval()

    def make_inputs(self, batch_size: int) -> Any:
        args, kwargs = nested_call(batch_size)
        return {"values": args[0], **kwargs}


class TestKeywordsConformance(KeywordsAndDynamicAxisCalls, BackendConformance):
    def make_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend()

    def make_other_backend(self) -> OpenVINOBackend:
        return OpenVINOBackend(num_threads=0)
