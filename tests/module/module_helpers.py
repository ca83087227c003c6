"""Small models, backends and tuning shortcuts for the wrapper's routing tests.

``FrozenBackend`` behaves like a compiled backend: it runs a copy of the module taken
when it was built, in the mode it had then, without gradients, so it keeps answering
with the weights it was built from whatever happens to the module afterwards.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs
import torch
from torch import nn

import aitune_core as ait
from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.strategies import OneBackendStrategy

FAST_PROFILE = ProfileConfig(warmup_iterations=1, window=4, min_time_s=0.002, max_time_s=0.01, max_batch_search=False)
WIDTH = 8


def mlp() -> nn.Module:
    """Linear, BatchNorm and Dropout: weights, buffers and a train/eval difference."""
    return nn.Sequential(nn.Linear(WIDTH, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4)).eval()


def samples(count: int = 4) -> list[torch.Tensor]:
    return [torch.randn(WIDTH) for _ in range(count)]


@attrs.frozen
class FrozenConfig(BackendConfig):
    pass


class FrozenBackend(Backend):
    """Answers with a copy of the module made at build time, like an exported graph."""

    name = "test_frozen"
    config_class = FrozenConfig

    def _build(self, context: BuildContext) -> None:
        self.built = copy.deepcopy(context.module)
        self.frozen: nn.Module | None = self.built
        self.calls = 0

    def _activate(self) -> None:
        self.frozen = self.built  # like reloading a package: the weights it was built with

    def _deactivate(self) -> None:
        self.frozen = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self.frozen is not None
        self.calls += 1
        with torch.no_grad():
            return self.frozen(*args, **kwargs)


@attrs.frozen
class InterruptConfig(BackendConfig):
    pass


class InterruptingBackend(Backend):
    """Its build is interrupted, as by Ctrl-C in the middle of a compile."""

    name = "test_interrupting"
    config_class = InterruptConfig

    def _build(self, context: BuildContext) -> None:
        raise KeyboardInterrupt

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("never built")


def one(backend: Backend) -> OneBackendStrategy:
    """A strategy that selects ``backend`` whenever it is correct, however fast."""
    strategy = OneBackendStrategy(backend, profile=FAST_PROFILE)
    strategy.enable_performance_validation(False)
    return strategy


def tune_frozen(module: ait.Module, batch_sizes: list[int] | None = None) -> ait.TuneReport:
    return ait.tune(module, samples(), batch_sizes=batch_sizes or [1, 4], strategy=one(FrozenBackend()))
