"""Models, a lossy test backend and timers for the accuracy-budget tests.

``ShiftBackend`` is lossy on purpose and by a known amount: it adds ``shift`` to every
output of its module. With :func:`parallel_sum` as the pipeline (the sum of every
module's output) and :func:`negative_l1` as the metric, the drop of any set of lossy
modules is the sum of their shifts, so the search's choices can be checked exactly.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import nn

import aitune_core as ait
from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.profiling.timer import EAGER, ScriptedTimer

FAST_PROFILE = ProfileConfig(
    warmup_iterations=1, window=4, min_time_s=0.005, max_time_s=0.03, max_batch_search_time_s=0.5, max_batch_size=64
)
EAGER_S = 1e-3


@attrs.frozen
class ShiftConfig(BackendConfig):
    shift: float = 0.0
    tag: str = ""


class ShiftBackend(Backend):
    """Runs the module and adds ``shift`` to its output; declared lossy."""

    name = "test_shift"
    config_class = ShiftConfig
    config: ShiftConfig

    @property
    def lossy(self) -> bool:
        return True

    def _build(self, context: BuildContext) -> None:
        self.module = context.module

    def _activate(self) -> None:
        assert self.context is not None
        self.module = self.context.module

    def _deactivate(self) -> None:
        self.module = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs) + self.config.shift


class Sum(nn.Module):
    """Every branch sees the same input; the output is the sum of theirs."""

    def __init__(self, branches: list[nn.Module]) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum((branch(x) for branch in self.branches), torch.zeros(()))


def negative_l1(outputs: torch.Tensor, reference: torch.Tensor) -> float:
    """Higher is better; eager against itself scores 0, so the drop is the mean absolute difference."""
    return -float((outputs - reference).abs().mean())


def shifted_model(shifts: dict[str, float], latencies: dict[str, float], width: int = 8) -> tuple[Sum, Sum]:
    """``(model, untouched copy)``: one wrapped Linear per name, each with its own strategy.

    Each module's strategy offers eager (lossless) and ``ShiftBackend(shift, tag=name)``, timed
    by a ScriptedTimer at ``latencies[name]`` seconds against eager's 1 ms.
    """
    torch.manual_seed(0)
    branches = [nn.Linear(width, 4) for _ in shifts]
    original = Sum([nn.Linear(width, 4) for _ in shifts])
    original.load_state_dict(Sum(branches).state_dict())
    wrapped = []
    for (name, shift), branch in zip(shifts.items(), branches, strict=True):
        backend = ShiftBackend(shift=shift, tag=name)
        timer = ScriptedTimer({EAGER: EAGER_S, "TorchEagerBackend()": EAGER_S, backend.describe(): latencies[name]})
        strategy = ait.MaxThroughputStrategy(
            backends=[ait.TorchEagerBackend(), backend], profile=FAST_PROFILE, timer=timer
        )
        wrapped.append(ait.Module(branch.eval(), name, strategy=strategy))
    return Sum(wrapped).eval(), original.eval()
