"""What the JIT costs a call: before tuning, during it, and once routed.

* per-call overhead on a small MLP at batch 1 (where dispatch shows), paired round by
  round against calling the model without the JIT: while recording (every call is
  recorded), while tuning runs (calls run eagerly, unrecorded), and routed (to the eager
  backend, so the difference is dispatch alone; target <= 5 us);
* call latency of the demo CNN at batch 8 while a tuning runs in the background, against
  eager alone: p50 and p99, and how much later than eager the p99 call is (target:
  eager's p99 + 5 ms). Twice when Inductor is installed: Inductor JIT named, which
  compiles in this process, and the JIT's defaults, which build in a child process
  (:mod:`aitune_jit.placement`).

One intra-op thread, as serving processes on a shared machine often run.
"""

from __future__ import annotations

import copy
import importlib.util
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

import aitune_core as ait
from aitune_core.demo.models import DemoCNN
from bench.timing import Options, Result, Stats, alternate, calibrate, paired_differences, per_call, percentile
from bench.tuning import SmallMLP

DISPATCH_TARGET_US = 5.0
LATE_TARGET_MS = 5.0


class _Held(ait.TorchEagerBackend):
    """The eager backend, whose build waits until released: a tuning that stays in progress."""

    release = threading.Event()

    def _build(self, context: Any) -> None:
        type(self).release.wait(120)
        super()._build(context)


def _hot(fn: Any) -> Any:
    number = calibrate(fn, target_s=0.01)
    return lambda: per_call(fn, number)


def _overhead(name: str, jit_call: Any, plain_call: Any, rounds: int, target: float | None) -> list[Result]:
    measured = alternate({"with jit": _hot(jit_call), "without": _hot(plain_call)}, rounds=rounds)
    difference = paired_differences(measured["with jit"], measured["without"])
    return [
        *(Result(name, variant, Stats.of(values), "us") for variant, values in measured.items()),
        Result(name, "overhead", Stats.of(difference), "us", target, "paired per round"),
    ]


def call_overhead(options: Options) -> list[Result]:
    rounds = options.rounds(21, 5)
    x = torch.randn(1, 16)
    plain = SmallMLP().eval()
    results = []
    with torch.no_grad():
        model = copy.deepcopy(plain)
        ait.jit.enable(model, calls=10**9)
        results += _overhead("jit per call, recording", lambda: model(x), lambda: plain(x), rounds, None)
        ait.jit.disable()

        model = copy.deepcopy(plain)
        _Held.release = threading.Event()
        ait.jit.enable(model, calls=1, live_checks=1, strategy=ait.OneBackendStrategy(_Held()))
        model(x)  # recorded; the tuning starts and waits
        results += _overhead("jit per call, while tuning", lambda: model(x), lambda: plain(x), rounds, None)
        _Held.release.set()
        ait.jit.wait(60)
        status = next(iter(ait.jit.status().values()))
        results += _overhead(
            "jit per call, routed (eager backend)", lambda: model(x), lambda: plain(x), rounds, DISPATCH_TARGET_US
        )
        results[-1].note += f"; {status}"
        ait.jit.disable()
    return results


def latency_during_tuning(options: Options, backends: list[str] | None = None) -> list[Result]:
    """p50/p99 of the demo CNN's calls while tuning runs; ``backends`` None: the JIT's default placement."""
    torch.manual_seed(0)
    plain = DemoCNN().eval()
    model = copy.deepcopy(plain)
    images = torch.randn(8, 3, 32, 32)

    def timed(fn: Any, calls: int) -> list[float]:
        out = []
        for _ in range(calls):
            start = time.perf_counter()
            fn(images)
            out.append(time.perf_counter() - start)
        return out

    with torch.no_grad():
        eager = timed(plain, options.rounds(400, 100))
        ait.jit.enable(model, calls=8, cache=False, **({"backends": backends} if backends else {}))
        during: list[float] = []
        while not during or not all(s.state.value in ("tuned", "failed") for s in ait.jit.status().values()):
            during += timed(model, 20)
            if len(during) > 200_000:
                break
        routed = timed(model, options.rounds(400, 100))
        status = "; ".join(str(s) for s in ait.jit.status().values())
        ait.jit.disable()
    ms = 1e3
    late = (percentile(during, 99) - percentile(eager, 99)) * ms
    where = f"{'+'.join(backends)} compiled in-process" if backends else "default candidates built in a child"
    name = f"demo CNN batch 8, {where}"
    return [
        Result(name, "eager p50", Stats.of([percentile(eager, 50)]), "ms"),
        Result(name, "eager p99", Stats.of([percentile(eager, 99)]), "ms"),
        Result(name, "during tuning p50", Stats.of([percentile(during, 50)]), "ms", note=f"{len(during)} calls"),
        Result(name, "during tuning p99", Stats.of([percentile(during, 99)]), "ms"),
        Result(name, "during tuning max", Stats.of([max(during)]), "ms"),
        Result(name, "p99 later than eager's", Stats.of([late / ms]), "ms", LATE_TARGET_MS),
        Result(name, "routed p50", Stats.of([percentile(routed, 50)]), "ms", note=status),
    ]


def run(options: Options) -> list[Result]:
    torch.set_num_threads(1)
    previous = ait.config.cache_dir
    with tempfile.TemporaryDirectory(prefix="aitune-bench-jit-") as folder:
        ait.config.cache_dir = Path(folder)
        try:
            results = call_overhead(options)
            if importlib.util.find_spec("aitune_inductor") is None:
                return results + latency_during_tuning(options, ["eager"])
            return results + latency_during_tuning(options, ["inductor_jit"]) + latency_during_tuning(options)
        finally:
            ait.config.cache_dir = previous
