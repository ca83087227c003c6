"""Models, a lossy test backend and timers for the accuracy-budget tests.

``ShiftBackend`` is lossy on purpose and by a known amount: it adds ``shift`` to every
output of its module. With :func:`parallel_sum` as the pipeline (the sum of every
module's output) and :func:`negative_l1` as the metric, the drop of any set of lossy
modules is the sum of their shifts, so the search's choices can be checked exactly.
"""

from __future__ import annotations

import itertools
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
_runs = itertools.count()


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


class ExactBackend(ShiftBackend):
    """The same computation, declared exact: a lossless candidate faster than eager by the script."""

    name = "test_exact"

    @property
    def lossy(self) -> bool:
        return False


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


def shifted_model(
    shifts: dict[str, float],
    latencies: dict[str, float],
    width: int = 8,
    exact_s: float | None = None,
    lossy: bool = True,
) -> tuple[Sum, Sum]:
    """``(model, untouched copy)``: one wrapped Linear per name (``name-N``, unique), each with its own strategy.

    Each module's strategy offers eager (lossless) and ``ShiftBackend(shift, tag=name)``, timed
    by a ScriptedTimer at ``latencies[name]`` seconds against eager's 1 ms; ``exact_s`` adds
    ``ExactBackend()`` at that latency, and ``lossy=False`` leaves the shifting one out.
    """
    torch.manual_seed(0)
    branches = [nn.Linear(width, 4) for _ in shifts]
    original = Sum([nn.Linear(width, 4) for _ in shifts])
    original.load_state_dict(Sum(branches).state_dict())
    wrapped = []
    run = next(_runs)
    for (name, shift), branch in zip(shifts.items(), branches, strict=True):
        backend = ShiftBackend(shift=shift, tag=name)
        timings = {EAGER: EAGER_S, "TorchEagerBackend()": EAGER_S, backend.describe(): latencies[name]}
        candidates: list[Backend] = [ait.TorchEagerBackend()]
        if exact_s is not None:
            candidates.append(ExactBackend())
            timings["ExactBackend()"] = exact_s
        if lossy:
            candidates.append(backend)
        strategy = ait.MaxThroughputStrategy(backends=candidates, profile=FAST_PROFILE, timer=ScriptedTimer(timings))
        wrapped.append(ait.Module(branch.eval(), f"{name}-{run}", strategy=strategy))
    return Sum(wrapped).eval(), original.eval()


def names(modules: list[str]) -> list[str]:
    """Module names without their run suffix: ``["a-3", "b-3"]`` -> ``["a", "b"]``."""
    return [name.rsplit("-", 1)[0] for name in modules]


def served(model: Sum) -> dict[str, str]:
    """Each wrapped branch's serving backend (graph 0), by its name without the suffix."""
    return {names([m.name])[0]: m.backends["0"].describe() for m in model.branches}
