"""Models and backends for the JIT tests: a backend whose build waits for the test, one that is
wrong on purpose, and a model whose forward can be held mid-call."""

from __future__ import annotations

import copy
import site
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from torch import nn

from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.profiling.measurement import ProfileConfig

FAST_PROFILE = ProfileConfig(
    warmup_iterations=1, window=4, min_time_s=0.005, max_time_s=0.03, max_batch_search=False, max_batch_size=64
)


class Hold:
    """Holds forwards called from the thread named :attr:`THREAD` until released.

    The events live here, not on the module: modules must stay deep-copyable.
    """

    THREAD = "held-call"
    entered = threading.Event()
    release = threading.Event()

    @classmethod
    def reset(cls) -> None:
        cls.entered = threading.Event()
        cls.release = threading.Event()


class TwoLayers(nn.Module):
    """A small MLP; ``holding`` makes eager forwards wait in :class:`Hold` (a call kept in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8)
        self.holding = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.holding and threading.current_thread().name == Hold.THREAD:
            Hold.entered.set()
            Hold.release.wait(30)
        return self.down(torch.relu(self.up(x)))


class Pipeline(nn.Module):
    """A model with children of different sizes, for choosing by depth and size."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 64)
        self.body = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
        self.norm = nn.LayerNorm(64)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.body(self.embed(x))))


@attrs.frozen
class GateConfig(BackendConfig):
    pass


class GatedBackend(Backend):
    """Correct; its build waits until the test opens :attr:`gate`. Counts the calls it serves."""

    name = "test_jit_gated"
    config_class = GateConfig
    gate = threading.Event()
    building = threading.Event()
    served = 0

    def _build(self, context: BuildContext) -> None:
        type(self).building.set()
        if not type(self).gate.wait(30):
            raise TimeoutError("the test never opened the gate")
        self.copy = copy.deepcopy(context.module)
        self.copy.holding = False

    def _activate(self) -> None:
        pass

    def _deactivate(self) -> None:
        pass

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        type(self).served += 1
        return self.copy(*args, **kwargs)

    @classmethod
    def reset(cls) -> None:
        cls.gate = threading.Event()
        cls.building = threading.Event()
        cls.served = 0


@attrs.frozen
class OffConfig(BackendConfig):
    factor: float = 1.01


class OffBackend(Backend):
    """Finite, well-shaped and wrong: every output scaled by ``factor``."""

    name = "test_jit_off"
    config_class = OffConfig

    def _build(self, context: BuildContext) -> None:
        self.copy = copy.deepcopy(context.module)

    def _activate(self) -> None:
        pass

    def _deactivate(self) -> None:
        pass

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self.copy(*args, **kwargs) * self.config.factor  # type: ignore[attr-defined]


def installed_startup_hook() -> Path:
    """The ``aitune_jit.pth`` that installing aitune-jit put into site-packages; skips the test without it.

    What these tests check is what a user gets from ``pip install`` (or ``pip install -e``):
    ``AITUNE_JIT=1 python script.py`` with nothing else, so they use the installed hook.
    """
    folders = [*site.getsitepackages(), site.getusersitepackages()]
    for folder in folders:
        found = Path(folder) / "aitune_jit.pth"
        if found.is_file():
            return found
    pytest.skip(f"aitune-jit is not installed (pip install ./plugins/aitune_jit): no aitune_jit.pth in {folders}")
