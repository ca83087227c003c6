"""What tuning costs and what a tuned call costs.

* dispatch overhead: a tuned module's call against calling the chosen backend's own
  callable directly, at batch 1 and batch 32, paired round by round (target <= 5 us);
* tune() wall time on the 512 -> 2048 -> 512 MLP over batch sizes [1, 2, 4, 8] with the
  default strategy, for eager alone and for eager plus one compiled backend when the
  inductor plugin is installed (target <= 30 s), split into gather, build, validate and
  profile, and the profiling time of each candidate (target <= 2 s);
* the demo's run time (`aitune demo`, in-process).
"""

from __future__ import annotations

import importlib.util
import itertools
import tempfile
import time
from typing import Any

import torch
from torch import nn

import aitune_core as ait
from aitune_core.demo.models import DemoMLP, mlp_samples
from bench.timing import Options, Result, Stats, alternate, calibrate, paired_differences, per_call

DISPATCH_TARGET_US = 5.0
TUNE_TARGET_S = 30.0
PROFILE_TARGET_S = 2.0
_names = itertools.count()


def _name(stem: str) -> str:
    return f"bench-{stem}-{next(_names)}"


class SmallMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def dispatch_overhead(options: Options) -> list[Result]:
    module = ait.Module(SmallMLP().eval(), _name("dispatch"))
    profile = ait.ProfileConfig(max_batch_search=False, min_time_s=0.001, max_time_s=0.01)
    ait.tune(
        module,
        [torch.randn(16) for _ in range(4)],
        batch_sizes=[1, 32],
        strategy=ait.FirstWinsStrategy([ait.TorchEagerBackend()], profile=profile),
    )
    direct = module.backends["0"].inference_callable()
    results = []
    with torch.no_grad():
        for batch in (1, 32):
            x = torch.randn(batch, 16)
            variants = {
                "tuned call": _hot(lambda x=x: module(x)),
                "backend callable": _hot(lambda x=x: direct(x)),
            }
            measured = alternate(variants, rounds=options.rounds(31, 7))
            overhead = paired_differences(measured["tuned call"], measured["backend callable"])
            results += [Result(f"dispatch, batch {batch}", name, Stats.of(v), "us") for name, v in measured.items()]
            results.append(
                Result(
                    f"dispatch, batch {batch}",
                    "overhead",
                    Stats.of(overhead),
                    "us",
                    DISPATCH_TARGET_US,
                    "paired per round",
                )
            )
    return results


def _hot(fn: Any) -> Any:
    number = calibrate(fn, target_s=0.01)
    return lambda: per_call(fn, number)


def _inductor_jit() -> list[ait.Backend]:
    if importlib.util.find_spec("aitune_inductor") is None:
        return []
    from aitune_inductor import TorchInductorJitBackend  # type: ignore[import-not-found]

    return [TorchInductorJitBackend()]


def tune_time(options: Options) -> list[Result]:
    sets = {"eager": [ait.TorchEagerBackend()]}
    compiled = _inductor_jit()
    if compiled:
        sets["eager + inductor JIT"] = [*compiled, ait.TorchEagerBackend()]
    results = []
    for label, backends in sets.items():
        totals: list[float] = []
        phases: dict[str, list[float]] = {"gather": [], "build": [], "validate": [], "profile": []}
        profiles: list[float] = []
        for _ in range(options.rounds(3, 1)):
            with tempfile.TemporaryDirectory() as cache:
                ait.config.cache_dir = cache
                module = ait.Module(DemoMLP().eval(), _name("tune"))
                start = time.perf_counter()
                report = ait.tune(
                    module, mlp_samples(), batch_sizes=[1, 2, 4, 8], strategy=ait.MaxThroughputStrategy(list(backends))
                )
                totals.append(time.perf_counter() - start)
                for phase in phases:
                    phases[phase].append(report.timings.get(phase, 0.0))
                profiles += [c.profile_s for g in report.graphs for c in g.candidates if c.measurement]
                del module
        results.append(Result("tune() MLP 512-2048-512, bs [1,2,4,8]", label, Stats.of(totals), "s", TUNE_TARGET_S))
        for phase, values in phases.items():
            results.append(Result("tune() MLP 512-2048-512, bs [1,2,4,8]", f"{label}: {phase}", Stats.of(values), "s"))
        results.append(
            Result(
                "profiling one candidate",
                label,
                Stats.of(profiles),
                "s",
                PROFILE_TARGET_S,
                "sweep over the batch sizes",
            )
        )
    ait.config.reset()
    return results


def demo_time(options: Options) -> list[Result]:
    from aitune_core.demo.run import run_demo

    values = []
    for _ in range(options.rounds(2, 1)):
        with tempfile.TemporaryDirectory() as cache:
            ait.config.cache_dir = cache
            start = time.perf_counter()
            run_demo("cnn")
            values.append(time.perf_counter() - start)
    ait.config.reset()
    return [Result("aitune demo (cnn, in-process)", "wall time", Stats.of(values), "s")]


def run(options: Options) -> list[Result]:
    torch.set_num_threads(options.threads)
    return dispatch_overhead(options) + tune_time(options) + demo_time(options)
