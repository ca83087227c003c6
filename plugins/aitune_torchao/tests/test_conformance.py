"""aitune's conformance suite for the int8 weight-only backend (and int8 dynamic activation)."""

from __future__ import annotations

from aitune_core.testing import BackendConformance
from aitune_torchao import TorchAOBackend


class TestInt8WeightOnlyConformance(BackendConformance):
    """The suite compares with eager through ``assert_close``; int8 weights need wider bounds."""

    batch_sizes = (2, 4, 8)
    rtol, atol = 5e-2, 5e-2

    def make_backend(self) -> TorchAOBackend:
        return TorchAOBackend(preset="int8wo")

    def make_other_backend(self) -> TorchAOBackend:
        return TorchAOBackend(preset="int8dq")


class TestInt8DynamicActivationConformance(TestInt8WeightOnlyConformance):
    def make_backend(self) -> TorchAOBackend:
        return TorchAOBackend(preset="int8dq")

    def make_other_backend(self) -> TorchAOBackend:
        return TorchAOBackend(preset="int8dq", modules={"types": ["Linear"], "exclude": ["0"]})
