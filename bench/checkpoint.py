"""Deploying from a checkpoint against tuning again.

The demo CNN is tuned with the AOT Inductor backend and saved. Then, in fresh processes,
``aitune_core.load`` into a freshly built model plus the first call is timed, with a
fresh Inductor cache each time so nothing compiled earlier can help (target <= 1 s, and
no compile). Import of torch and aitune is timed separately and not counted.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from pathlib import Path

import torch

import aitune_core as ait
from aitune_core.demo.models import build_demo
from bench.timing import Options, Result, Stats, run_python

LOAD_TARGET_S = 1.0

_LOAD = """
import os, time, torch
torch.set_num_threads({threads})
import aitune_core as ait
from aitune_core.demo.models import build_demo
model, samples = build_demo("cnn")
batch = torch.stack(samples[:4])
start = time.perf_counter()
tuned = ait.load(model, {path!r}, trust_native_code=True)
with torch.no_grad():
    tuned(batch)
print(time.perf_counter() - start)
"""


def run(options: Options) -> list[Result]:
    if importlib.util.find_spec("aitune_inductor") is None:
        return []
    from aitune_inductor import TorchInductorAotBackend  # type: ignore[import-not-found]

    torch.set_num_threads(options.threads)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        ait.config.cache_dir = root / "cache"
        model, samples = build_demo("cnn")
        module = ait.Module(model, "bench-checkpoint-cnn")
        start = time.perf_counter()
        ait.tune(module, samples, batch_sizes=[1, 2, 4, 8], strategy=ait.FirstWinsStrategy([TorchInductorAotBackend()]))
        tuned_s = time.perf_counter() - start
        path = ait.save(module, root / "ckpt")
        del module
        ait.config.reset()
        loads = []
        for index in range(options.rounds(5, 2)):
            env = {
                "TORCHINDUCTOR_CACHE_DIR": str(root / f"inductor-{index}"),
                "AITUNE_CACHE_DIR": str(root / f"c{index}"),
                "AITUNE_LOG_LEVEL": "error",
            }
            loads += run_python(_LOAD.format(threads=options.threads, path=str(path)), runs=1, env=env)
    return [
        Result("demo CNN, AOT Inductor", "tune()", Stats.of([tuned_s]), "s"),
        Result(
            "demo CNN, AOT Inductor",
            "load + first call, fresh process",
            Stats.of(loads),
            "s",
            LOAD_TARGET_S,
            f"{tuned_s / (sum(loads) / len(loads)):.0f}x faster than tuning",
        ),
    ]
