"""Small models and test backends for the tuning workflow tests.

The backends are real: they run the module (or a faster equivalent) and return its
results, except ``WrongBackend``, which returns finite, well-shaped and wrong numbers
on purpose, and ``BrokenBuildBackend``, whose build raises.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.profiling.measurement import ProfileConfig

FAST_PROFILE = ProfileConfig(
    warmup_iterations=1, window=4, min_time_s=0.005, max_time_s=0.03, max_batch_search_time_s=0.5, max_batch_size=64
)


class SlowableMLP(nn.Module):
    """An MLP whose eager forward can be made slow; a backend can run it without the delay."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8)
        self.delay_s = delay_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.down(torch.relu(self.up(x)))


class _ModuleBackend(Backend):
    """Runs a (possibly transformed) copy of the module."""

    def _prepare(self, module: nn.Module) -> nn.Module:
        return module

    def _build(self, context: BuildContext) -> None:
        self.built_module = self._prepare(context.module)

    def _deactivate(self) -> None:
        self.built_module = None

    def _activate(self) -> None:
        assert self.context is not None
        self.built_module = self._prepare(self.context.module)

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self.built_module(*args, **kwargs)


@attrs.frozen
class NoDelayConfig(BackendConfig):
    pass


class NoDelayBackend(_ModuleBackend):
    """Correct and faster than eager when eager sleeps: drops the artificial delay."""

    name = "test_no_delay"
    config_class = NoDelayConfig

    def _prepare(self, module: nn.Module) -> nn.Module:
        fast = copy.deepcopy(module)
        fast.delay_s = 0.0
        return fast


@attrs.frozen
class DelayConfig(BackendConfig):
    delay_s: float = 0.003


class SlowBackend(_ModuleBackend):
    """Correct but slower than eager."""

    name = "test_slow"
    config_class = DelayConfig

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self.config.delay_s)  # type: ignore[attr-defined]
        return super()._infer(*args, **kwargs)


@attrs.frozen
class WrongConfig(BackendConfig):
    factor: float = 1.01


class WrongBackend(_ModuleBackend):
    """Finite, well-shaped and wrong: scales every output by ``factor``."""

    name = "test_wrong"
    config_class = WrongConfig

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return super()._infer(*args, **kwargs) * self.config.factor  # type: ignore[attr-defined]


@attrs.frozen
class BrokenConfig(BackendConfig):
    message: str = "compiler exploded"


class BuildError(RuntimeError):
    pass


class BrokenBuildBackend(_ModuleBackend):
    name = "test_broken"
    config_class = BrokenConfig

    def _prepare(self, module: nn.Module) -> nn.Module:
        raise BuildError(self.config.message)  # type: ignore[attr-defined]


@attrs.frozen
class NaNConfig(BackendConfig):
    pass


class NaNBackend(_ModuleBackend):
    name = "test_nan"
    config_class = NaNConfig

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._infer(*args, **kwargs).clone()
        out[0, 0] = float("nan")
        return out


class PerSampleCostMLP(SlowableMLP):
    """Eager costs ``per_sample_s`` for every sample of a batch: fast at batch 1, slow at 64."""

    def __init__(self, per_sample_s: float) -> None:
        super().__init__()
        self.per_sample_s = per_sample_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.per_sample_s:
            time.sleep(self.per_sample_s * x.shape[0])
        return super().forward(x)


@attrs.frozen
class FixedCostConfig(BackendConfig):
    delay_s: float = 0.003


class FixedCostBackend(_ModuleBackend):
    """A fixed cost per call whatever the batch: slower than eager at small batches, faster at large."""

    name = "test_fixed_cost"
    config_class = FixedCostConfig

    def _prepare(self, module: nn.Module) -> nn.Module:
        fast = copy.deepcopy(module)
        fast.per_sample_s = 0.0
        return fast

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self.config.delay_s)  # type: ignore[attr-defined]
        return super()._infer(*args, **kwargs)
