"""Backends that are wrong in the ways validation once let through, and small models for them.

Each one is correct on the calls the old validation made (the first stored sample, and
the min, opt and max shapes, once each) and wrong somewhere else a tuned module is
called: at some batch sizes, on the second call of a shape, or in what it does to its
inputs.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.profiling.measurement import ProfileConfig

QUICK_PROFILE = ProfileConfig(
    warmup_iterations=1, window=4, min_time_s=0.002, max_time_s=0.01, max_batch_search=False, sweep=False
)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class CenteredMLP(MLP):
    """Subtracts the mean over the whole call: one NaN anywhere makes every output NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        return y - y.mean()


@attrs.frozen
class NoConfig(BackendConfig):
    pass


class RunsModule(Backend):
    """Runs the module itself; subclasses spoil the result in one way each."""

    name = "test_runs_module"
    config_class = NoConfig

    module: nn.Module | None = None

    def _build(self, context: BuildContext) -> None:
        self.module = context.module

    def _activate(self) -> None:
        assert self.context is not None
        self.module = self.context.module

    def _deactivate(self) -> None:
        self.module = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self.module is not None
        return self.module(*args, **kwargs)


class WrongAtBatch2And4(RunsModule):
    name = "test_wrong_at_2_and_4"

    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        out = super()._infer(x)
        return out * 1.5 if x.shape[0] in (2, 4) else out


class WrongOffPowersOfTwo(RunsModule):
    """A tail bug: right at batch 1, 2, 4, 8..., wrong at every other batch size."""

    name = "test_wrong_off_powers_of_two"

    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        out = super()._infer(x)
        batch = x.shape[0]
        return out if batch & (batch - 1) == 0 else out + 0.5


class StaleCache(RunsModule):
    """Returns the outputs of the first call with the same shape: the static-buffer bug."""

    name = "test_stale_cache"

    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        cache = self.__dict__.setdefault("cache", {})
        key = tuple(x.shape)
        if key not in cache:
            cache[key] = super()._infer(x)
        return cache[key].clone()


class NegatesInput(RunsModule):
    """Right outputs, but the caller's input is negated in place afterwards."""

    name = "test_negates_input"

    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        out = super()._infer(x.clone())
        x.neg_()
        return out


class HalfWrong(RunsModule):
    """Every other output column is 50% off."""

    name = "test_half_wrong"

    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        out = super()._infer(x).clone()
        out[:, ::2] *= 1.5
        return out


class Correct(RunsModule):
    """Right everywhere; remembers the batch sizes it was called with."""

    name = "test_correct"

    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        self.__dict__.setdefault("batches", set()).add(x.shape[0])
        return super()._infer(x)
