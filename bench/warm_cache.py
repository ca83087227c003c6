"""Warm cache: tune() of the same model again, in a new process, against the first time.

What a user sees when they tune a model they tuned before: each round runs two fresh
processes on the same, initially empty ``TORCHINDUCTOR_CACHE_DIR`` and
``AITUNE_CACHE_DIR``. Both tune the 512 -> 2048 -> 512 MLP over batch sizes
[1, 2, 4, 8] with MaxThroughputStrategy over TorchInductorJitBackend and eager, on one
torch thread. Reported, per process: tune() wall time, split into gather, build,
validate, profile and the strategy's other work (max batch search, ranking), so that
what the backends cost (build) reads apart from what the strategy costs; and the JIT
build's compile count (graphs and recompiles from its "build finished" log). In a new
process the build also pays for importing Dynamo and Inductor, as a user's first
tune() does.

Targets: the warm tune() takes <= 2 s, and is at least 2x faster than the cold one.

``python -m bench warm_cache`` runs it; ``python -m bench.warm_cache --child`` is one
tune() in this process (what each round starts), printing its numbers as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.timing import ROOT, Options, Result, Stats, median

WARM_TUNE_TARGET_S = 2.0
SPEEDUP_TARGET = 2.0
PHASES = ("gather", "build", "validate", "profile", "other")
NAME = "tune() MLP 512-2048-512, bs [1,2,4,8], inductor JIT + eager"


def _child() -> dict[str, Any]:
    """One tune() of the MLP in this process, with the caches the environment names."""
    started = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    import aitune_core as ait
    from aitune_core.demo.models import DemoMLP, mlp_samples
    from aitune_core.log import capture

    _plugin_on_path()
    from aitune_inductor import TorchInductorJitBackend

    torch.manual_seed(0)  # the same weights in every process: caches are keyed on them
    module = ait.Module(DemoMLP().eval(), "bench-warm-cache-mlp")
    strategy = ait.MaxThroughputStrategy([TorchInductorJitBackend(), ait.TorchEagerBackend()])
    imported = time.perf_counter()
    with capture() as events:
        report = ait.tune(module, mlp_samples(), batch_sizes=[1, 2, 4, 8], strategy=strategy)
    tuned = time.perf_counter()
    (build,) = [e for e in events if e["event"] == "build finished" and "Inductor" in str(e.get("backend"))]
    phases = {phase: report.timings.get(phase, 0.0) for phase in PHASES if phase != "other"}
    return {
        "tune_s": tuned - imported,
        "import_s": imported - started,
        **phases,
        "other": max(0.0, tuned - imported - sum(phases.values())),
        "graphs": build.get("graphs"),
        "recompiles": build.get("recompiles"),
        "compile_s": build.get("compile_s"),
        "size_one": build.get("size_one", ""),
        "profiles": {c.backend: round(c.profile_s, 3) for g in report.graphs for c in g.candidates},
        "selected": [g.selected.backend if g.selected else None for g in report.graphs],
    }


def _plugin_on_path() -> None:
    """Let the bench run from a source checkout where the plugin is not installed."""
    try:
        import aitune_inductor  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "aitune_inductor"))


def _tune_in_new_process(caches: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
        "AITUNE_CACHE_DIR": str(caches / "aitune"),
    }
    completed = subprocess.run(
        [sys.executable, "-m", "bench.warm_cache", "--child"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"warm_cache child failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def run(options: Options) -> list[Result]:
    runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
    for _ in range(options.rounds(3, 1)):
        with tempfile.TemporaryDirectory(prefix="aitune-warm-cache-") as folder:
            for kind in ("cold", "warm"):
                runs[kind].append(_tune_in_new_process(Path(folder)))
    ratio = median([c["tune_s"] / w["tune_s"] for c, w in zip(runs["cold"], runs["warm"], strict=True)])
    results = []
    for kind, measured in runs.items():
        last = measured[-1]
        compiles = f"graphs={last['graphs']} recompiles={last['recompiles']} compile_s={last['compile_s']}"
        speedup = f"{ratio:.2f}x faster than cold (target >= {SPEEDUP_TARGET}x); "
        note = compiles if kind == "cold" else speedup + compiles
        results.append(
            Result(
                NAME,
                f"{kind} caches",
                Stats.of([m["tune_s"] for m in measured]),
                "s",
                WARM_TUNE_TARGET_S if kind == "warm" else None,
                note,
                extra={"runs": measured, **({"cold_over_warm": ratio} if kind == "warm" else {})},
            )
        )
        for phase in PHASES:
            results.append(Result(NAME, f"{kind} caches: {phase}", Stats.of([m[phase] for m in measured]), "s"))
    if ratio < SPEEDUP_TARGET:
        print(f"warm tune() only {ratio:.2f}x faster than cold (target >= {SPEEDUP_TARGET}x)", file=sys.stderr)
    return results


if __name__ == "__main__":
    if sys.argv[1:] != ["--child"]:
        sys.exit("python -m bench.warm_cache --child runs one tune(); the bench is `python -m bench warm_cache`")
    print(json.dumps(_child()))
