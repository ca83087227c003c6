"""Registration through aitune's plugin hooks, as an installed distribution is found."""

from __future__ import annotations

from typing import Any

import pytest

from aitune_core.testing.engine import PluginStatus, default_candidates, get_backend_class
from aitune_core.testing.packaging import installed_entry_points, pyproject
from aitune_inductor import TorchInductorAotBackend, TorchInductorJitBackend

ENTRY_POINT = "aitune_inductor.plugin"


@pytest.fixture
def registry(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> Any:
    dist = aitune_fake_dist("aitune-inductor", entry_points={"inductor": ENTRY_POINT})
    return aitune_isolated_plugins.load(dist, strict=True)


def test_registers_both_backends(registry: Any) -> None:
    (record,) = [r for r in registry.records() if r.distribution == "aitune-inductor"]
    assert record.name == "inductor"
    assert record.backends == ("inductor_jit", "inductor_aot")
    assert record.status in (PluginStatus.LOADED, PluginStatus.UNAVAILABLE)
    assert get_backend_class("inductor_jit") is TorchInductorJitBackend
    assert get_backend_class("inductor_aot") is TorchInductorAotBackend


def test_default_candidates_jit_then_aot_then_eager(registry: Any) -> None:
    candidates = default_candidates("cpu")
    assert [c.name for c in candidates] == ["inductor_jit", "inductor_aot", "eager"]
    assert all(c.plugin == "aitune-inductor" for c in candidates[:2])
    for candidate in candidates[:2]:
        assert candidate.availability == type(candidate.backend).availability("cpu")
    assert [c.name for c in default_candidates("mps")] == ["eager"]


def test_unavailable_without_a_compiler(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    import torch._inductor.config as inductor_config

    dist = aitune_fake_dist("aitune-inductor", entry_points={"inductor": ENTRY_POINT})
    with inductor_config.patch({"cpp.cxx": (None, "no-such-compiler++")}):
        registry = aitune_isolated_plugins.load(dist)
        candidates = default_candidates("cpu")
    (record,) = [r for r in registry.records() if r.distribution == "aitune-inductor"]
    assert record.status is PluginStatus.UNAVAILABLE
    assert "inductor_jit: no C++ compiler" in record.reason and "inductor_aot: no C++ compiler" in record.reason
    assert [c.available for c in candidates] == [False, False, True]


def test_pyproject_declares_the_entry_point() -> None:
    declared = pyproject(__file__)
    assert declared["project"]["entry-points"]["aitune.plugins"] == {"inductor": ENTRY_POINT}
    assert installed_entry_points("aitune-inductor") in (None, [("inductor", ENTRY_POINT)])
