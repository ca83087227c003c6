"""tune() wall time of the same four candidates in-process and on Ray with two workers, on this machine.

The demo MLP (512 -> 2048 -> 512) over batch sizes [1, 2, 4, 8], MaxThroughputStrategy,
four candidates: Inductor JIT, Inductor AOT, eager under bf16 autocast and eager. It is
tuned in-process and with ``RayExecutor(workers=2)`` on a two-CPU Ray started
beforehand (the start-up is reported on its own: a cluster is normally up already).
Compiler caches on disk are off in the driver and the workers, so that no variant
reuses another's compiles.

The first tune of each is reported apart ("cold"): Ray's workers then import torch and
the compilers, and the driver compiles for the first time. The rounds after it
("warm") alternate the order of the two. Reported: wall times, the ratio in-process /
Ray (above 1: Ray is faster) and Ray's start-up. Needs aitune-inductor and aitune-ray;
without them the suite reports nothing and says why.

``python -m bench.executors [--quick]`` runs it alone.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import tempfile
import time
from typing import Any

import torch

from bench.timing import Options, Result, Stats

NAME = "tune() MLP 512-2048-512, 4 candidates, bs [1,2,4,8]"
_names = itertools.count()
_NO_CACHES = {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}


def _candidates() -> list[Any]:
    from aitune_inductor import TorchInductorAotBackend, TorchInductorJitBackend

    import aitune_core as ait

    return [
        TorchInductorJitBackend(),
        TorchInductorAotBackend(),
        ait.TorchEagerBackend(autocast_enabled=True, autocast_dtype=torch.bfloat16),
        ait.TorchEagerBackend(),
    ]


def _tune_once(executor: Any) -> tuple[float, str]:
    import aitune_core as ait
    from aitune_core.demo.models import DemoMLP, mlp_samples

    with tempfile.TemporaryDirectory() as cache:
        ait.config.cache_dir = cache
        torch.manual_seed(0)
        module = ait.Module(DemoMLP().eval(), f"bench-executor-{next(_names)}")
        start = time.perf_counter()
        report = ait.tune(
            module,
            mlp_samples(),
            batch_sizes=[1, 2, 4, 8],
            strategy=ait.MaxThroughputStrategy(_candidates()),
            executor=executor,
        )
        elapsed = time.perf_counter() - start
        selected = report.selected(module.name) or "-"
        del module
    return elapsed, selected


def run(options: Options) -> list[Result]:
    missing = [name for name in ("aitune_inductor", "aitune_ray") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"executors: skipped, {' and '.join(missing)} not installed", file=sys.stderr)
        return []
    import ray
    from aitune_ray import RayExecutor

    torch.set_num_threads(options.threads)
    os.environ.update(_NO_CACHES)
    paths = os.pathsep.join(dict.fromkeys(entry or os.getcwd() for entry in sys.path))
    start = time.perf_counter()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": paths, "OMP_NUM_THREADS": str(options.threads), **_NO_CACHES}},
    )
    startup = time.perf_counter() - start
    variants = ["in-process", "ray, 2 workers"]
    times: dict[str, list[float]] = {f"{variant}, {phase}": [] for phase in ("cold", "warm") for variant in variants}
    winners: dict[str, set[str]] = {name: set() for name in times}
    try:
        rounds = [variants] + [
            variants if index % 2 else list(reversed(variants)) for index in range(options.rounds(4, 1))
        ]
        for index, order in enumerate(rounds):
            phase = "cold" if index == 0 else "warm"
            for variant in order:
                executor = "inprocess" if variant == "in-process" else RayExecutor(workers=2)
                elapsed, selected = _tune_once(executor)
                times[f"{variant}, {phase}"].append(elapsed)
                winners[f"{variant}, {phase}"].add(selected)
                print(f"  {phase} {index}, {variant}: {elapsed:.1f} s, selected {selected}", flush=True)
    finally:
        ray.shutdown()
        import aitune_core as ait

        ait.config.reset()
    results = [
        Result(NAME, name, Stats.of(values), "s", extra={"selected": sorted(winners[name])})
        for name, values in times.items()
    ]
    for phase in ("cold", "warm"):
        local, remote = times[f"in-process, {phase}"], times[f"ray, 2 workers, {phase}"]
        ratios = [a / b for a, b in zip(local, remote, strict=True)]
        note = "a factor, not seconds: >1 is Ray faster"
        results.append(Result(NAME, f"ratio in-process / ray, {phase}", Stats.of(ratios), "s", note=note))
    results.append(Result("ray.init, 2 CPUs, local", "start-up", Stats.of([startup]), "s"))
    return results


if __name__ == "__main__":
    from bench.timing import format_table

    print(format_table(run(Options(quick="--quick" in sys.argv))))
