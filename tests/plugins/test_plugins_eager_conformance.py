"""The core's own backend passes the conformance suite it asks of every plugin."""

from __future__ import annotations

import torch

from aitune_core.backends.eager import TorchEagerBackend
from aitune_core.testing import BackendConformance
from aitune_core.testing.models import KeywordsAndDynamicAxisCalls


class TestEagerConformance(BackendConformance):
    def make_backend(self) -> TorchEagerBackend:
        return TorchEagerBackend()

    def make_other_backend(self) -> TorchEagerBackend:
        return TorchEagerBackend(autocast_enabled=True, autocast_dtype=torch.bfloat16)


class TestEagerConformanceWithKeywordsAndDynamicAxis(KeywordsAndDynamicAxisCalls, BackendConformance):
    """A model called with keywords, whose inputs also have a dynamic (non-batch) axis."""

    def make_backend(self) -> TorchEagerBackend:
        return TorchEagerBackend()


class TestEagerConformanceWithNestedOutputs(BackendConformance):
    """The testing kit's own Nested model: a string beside the tensors in its output, a flag baked in."""

    batch_sizes = (2, 3)

    def make_model(self) -> torch.nn.Module:
        from aitune_core.testing.models import Nested

        return Nested().eval()

    def make_inputs(self, batch_size: int) -> dict[str, object]:
        from aitune_core.testing.models import nested_call

        args, kwargs = nested_call(batch_size)
        return {"values": args[0], **kwargs}

    def make_backend(self) -> TorchEagerBackend:
        return TorchEagerBackend()
