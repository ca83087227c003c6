"""The selection suite's traps and warm-cache tune (see :mod:`bench.selection` for the suite).

* traps, on the wall clock: a backend that runs the module and then busy-waits 10% of
  eager's measured time must never be selected; one that skips 10% of an artificial
  per-call delay that eager pays must be selected;
* warm-cache tune of the 512-2048-512 MLP with inductor JIT and eager: ``tune()`` wall time
  with a warm ``TORCHINDUCTOR_CACHE_DIR`` (target 2 s), and the compiles in the build log.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.neighbours import bursty_neighbours, load_wanted
from bench.selection import _batch, _installed, _say, _spawn, _time_variants
from bench.timing import Options, Ratio, Result, Stats

WARM_TUNE_TARGET_S = 2.0
TRAP_DELAY_S = 0.002
"""The artificial per-call delay that eager pays in the trap model (the fast trap skips 10% of it)."""
BUILD_FINISHED = re.compile(r"build finished.*")


def _trap_classes() -> tuple[Any, Any, Any]:
    """The trap model and the two trap backends (defined here so that torch loads only in the subprocess)."""
    import attrs
    import torch

    import aitune_core as ait
    from bench.tuning import SmallMLP

    def spin(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    class SpinMLP(SmallMLP):
        """The small MLP, busy-waiting ``delay_s`` per call before computing."""

        def __init__(self, delay_s: float) -> None:
            super().__init__()
            self.delay_s = delay_s

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.delay_s:
                spin(self.delay_s)
            return super().forward(x)

    @attrs.frozen
    class SlowTrapConfig(ait.BackendConfig):
        delays: tuple[tuple[int, float], ...] = ()
        """Extra busy-wait per call by batch size: 10% of eager's measured time there."""

    class SlowTrapBackend(ait.Backend):
        """Correct, and 10% slower than eager: runs the module, then busy-waits."""

        name = "bench_slow_trap"
        config_class = SlowTrapConfig

        def _build(self, context: Any) -> None:
            self.module = context.module
            self.delays = dict(self.config.delays)  # type: ignore[attr-defined]
            self.fallback = max(self.delays.values(), default=0.0)

        def _infer(self, *args: Any, **kwargs: Any) -> Any:
            out = self.module(*args, **kwargs)
            spin(self.delays.get(args[0].shape[0], self.fallback))
            return out

    @attrs.frozen
    class FastTrapConfig(ait.BackendConfig):
        keep: float = 0.9
        """The share of the module's artificial delay that this backend still pays."""

    class FastTrapBackend(ait.Backend):
        """Correct, and about 10% faster than eager: pays only ``keep`` of the module's delay."""

        name = "bench_fast_trap"
        config_class = FastTrapConfig

        def _build(self, context: Any) -> None:
            self.module = copy.deepcopy(context.module)
            self.module.delay_s = context.module.delay_s * self.config.keep  # type: ignore[attr-defined]

        def _infer(self, *args: Any, **kwargs: Any) -> Any:
            return self.module(*args, **kwargs)

    return SpinMLP, SlowTrapBackend, FastTrapBackend


def _trap_job(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    import aitune_core as ait

    torch.set_num_threads(job["threads"])
    ait.config.cache_dir = job["cache_dir"]
    spin_mlp, slow_trap, fast_trap = _trap_classes()
    sizes = [1, 4]
    generator = torch.Generator().manual_seed(0)
    samples = [torch.randn(16, generator=generator) for _ in range(8)]
    # The strategy's defaults, less the max-batch search: eager's throughput here grows with
    # the batch without end (the delay is per call), so the search would only add time.
    profile = ait.ProfileConfig(max_batch_search=False)

    probe = spin_mlp(TRAP_DELAY_S).eval()
    eager_s = {}
    for size in sizes:
        x = _batch(samples, size)
        measured = _time_variants({"eager": lambda x=x: probe(x)}, rounds=9)["eager"]
        eager_s[size] = statistics.median(measured)

    outcomes: dict[str, list[dict[str, Any]]] = {"slow": [], "fast": []}
    for index in range(job["runs"]):
        for kind in ("slow", "fast"):
            torch.manual_seed(0)
            model = spin_mlp(TRAP_DELAY_S).eval()
            if kind == "slow":
                backend = slow_trap(delays=tuple((size, 0.1 * eager_s[size]) for size in sizes))
            else:
                backend = fast_trap(keep=0.9)
            wrapped = ait.Module(model, f"selection-trap-{kind}-{index}")
            with bursty_neighbours(seed=index) if job.get("load") else contextlib.nullcontext():
                report = ait.tune(
                    wrapped, samples, batch_sizes=sizes, strategy=ait.MaxThroughputStrategy([backend], profile=profile)
                )
            row = next(c for g in report.graphs for c in g.candidates if c.backend == backend.describe())
            outcomes[kind].append(
                {
                    "status": row.status,
                    "serves": [size for size in sizes if row.status == "selected" and row.serves_batch(size)],
                    "speedups": {str(size): s.describe() for size, s in row.speedups.items()},
                    "reason": row.reason[:160],
                }
            )
    return {"eager_s": {str(k): v for k, v in eager_s.items()}, "outcomes": outcomes}


def _warm_job(job: dict[str, Any]) -> dict[str, Any]:
    import torch
    from aitune_inductor import TorchInductorJitBackend  # type: ignore[import-not-found]

    import aitune_core as ait
    from aitune_core.demo.models import DemoMLP, mlp_samples

    torch.set_num_threads(job["threads"])
    ait.config.cache_dir = job["cache_dir"]
    torch.manual_seed(0)
    wrapped = ait.Module(DemoMLP().eval(), "selection-warm-mlp")
    strategy = ait.MaxThroughputStrategy([TorchInductorJitBackend(), ait.TorchEagerBackend()])
    start = time.perf_counter()
    report = ait.tune(wrapped, mlp_samples(), batch_sizes=[1, 2, 4, 8], strategy=strategy)
    return {"tune_s": time.perf_counter() - start, "phases": dict(report.timings)}


TRAP_JOBS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"trap": _trap_job, "warm": _warm_job}


def traps(options: Options, work: Path) -> list[Result]:
    count = options.rounds(20, 3)
    job = {
        "kind": "trap",
        "runs": count,
        "threads": options.threads,
        "cache_dir": str(work / "aitune"),
        "load": load_wanted(),
    }
    started = time.perf_counter()
    outcome, _ = _spawn(job)
    _say(f"traps: {count} runs each ({time.perf_counter() - started:.0f} s)")
    results: list[Result] = []
    for kind, rule in (("slow", "never selected"), ("fast", f">= {0.9 * count:.0f} of {count}")):
        rows = outcome["outcomes"][kind]
        any_size = sum(1 for r in rows if r["serves"])
        every = sum(1 for r in rows if len(r["serves"]) == 2)
        met = any_size == 0 if kind == "slow" else every >= 0.9 * count
        label = "10% slower (busy-waits 10% of eager)" if kind == "slow" else "10% faster (skips 10% of eager's delay)"
        speedups = collections.Counter(s for r in rows for s in r["speedups"].values())
        _say(f"trap {kind}: selected in {any_size}/{count} (every size {every}); speedups seen: {dict(speedups)}")
        results.append(
            Ratio(
                f"trap: {label}",
                "runs where it serves every batch size",
                Stats.of([every / count]),
                note=f"serves some size in {any_size}/{count}, every size in {every}/{count}; "
                f"needs {rule}: {'MET' if met else 'NOT MET'}",
                passed=met,
                extra={"eager_s": outcome["eager_s"], "runs": rows},
            )
        )
    return results


def warm_cache(options: Options, work: Path) -> list[Result]:
    if not _installed("aitune_inductor"):
        _say("warm cache: skipped, aitune_inductor is not installed")
        return []
    env = {"TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-warm")}
    job = {"kind": "warm", "threads": options.threads, "cache_dir": str(work / "aitune-warm")}
    cold, _ = _spawn(job, env)
    _say(f"warm cache: first (cold) tune {cold['tune_s']:.1f} s")
    times, builds, phases = [], [], []
    for _ in range(options.rounds(3, 1)):
        warm, log = _spawn(job, env)
        times.append(warm["tune_s"])
        phases.append(warm["phases"])
        builds += [
            " ".join(re.findall(r"\b(?:backend|graphs|recompiles|compile_s)=\S+", line))
            for line in BUILD_FINISHED.findall(log)
        ]
    _say(f"warm cache: tune {', '.join(f'{t:.2f}' for t in times)} s; builds: {builds[: len(builds) // len(times)]}")
    build_s = statistics.median(p.get("build", 0.0) for p in phases)
    return [
        Result(
            "warm-cache tune() MLP 512-2048-512, bs [1,2,4,8], inductor JIT + eager",
            "wall time",
            Stats.of(times),
            "s",
            WARM_TUNE_TARGET_S,
            f"build {build_s:.2f} s of it; cold {cold['tune_s']:.1f} s; log: {'; '.join(dict.fromkeys(builds))}",
            extra={"cold_s": cold["tune_s"], "phases": phases, "builds": builds},
        )
    ]
