"""Autocast changes the numbers on purpose (``Backend.lossy``); compiling alone does not."""

from __future__ import annotations

from aitune_inductor import TorchInductorAotBackend, TorchInductorJitBackend


def test_autocast_is_lossy() -> None:
    assert not TorchInductorJitBackend().lossy
    assert TorchInductorJitBackend(autocast_enabled=True).lossy
    assert not TorchInductorAotBackend().lossy
