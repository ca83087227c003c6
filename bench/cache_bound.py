"""The cache under its cap: default tunes of the demo CNN, each with weights of its own, under 300 MiB.

Each tune runs in a fresh process, as a CI runner that tunes on every run or a service
restarted with a new model does, on one shared cache folder (``AITUNE_CACHE_DIR``, with
``AITUNE_CACHE_MAX_MB=300``) and one Inductor cache, one torch thread, the default
strategy over the default candidates of the plugins ``aitune demo`` uses on a CPU
(``AITUNE_PLUGINS=inductor,onnx,openvino``: Inductor JIT and AOT, ONNX Runtime, OpenVINO;
the lossy ones are skipped by default). Every tune's weights differ (seeds 1000 and up),
so nothing is reused and every candidate is built and stored.

Reported: the cache's size right after each ``tune()`` (the tuned module still serving
from its build folders) and after its process ended, counted as ``du`` counts (each
hard-linked file once, measured here, not by aitune), the largest of each against the
cap, the evictions logged (``cache evicted``) and the garbage removed (``cache cleaned``),
and each tune's wall time.

``python -m bench cache_bound`` runs 20 tunes (``--quick``: 3; ``AITUNE_BENCH_TUNES=N``:
N) under 300 MiB (``AITUNE_BENCH_CACHE_MB=M``: M, to see evictions sooner);
``python -m bench.cache_bound --child SEED`` is one tune in this process, printing its
numbers as JSON.
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

from bench.timing import ROOT, Options, Result, Stats

CAP_MB = int(os.environ.get("AITUNE_BENCH_CACHE_MB", 0)) or 300
PLUGINS = "inductor,onnx,openvino"
MIB = 2**20


def cache_size(folder: Path) -> int:
    """Bytes under ``folder``, each hard-linked file once (as ``du`` counts them)."""
    files: dict[tuple[int, int], int] = {}
    for base, _, names in os.walk(folder):
        for name in names:
            try:
                info = os.lstat(os.path.join(base, name))
            except OSError:
                continue
            files[(info.st_dev, info.st_ino)] = info.st_size
    return sum(files.values())


def _child(seed: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    import aitune_core as ait
    from aitune_core.demo.models import DEMO_MODELS, build_demo
    from aitune_core.log import capture
    from aitune_core.store.usage import PARTS, scan

    _, samples = build_demo("cnn")
    torch.manual_seed(1000 + seed)
    model = DEMO_MODELS["cnn"][0]().eval()  # the demo CNN with weights of its own
    wrapped = ait.Module(model, f"bench-cache-bound-{seed}")
    with capture() as events:
        started = time.perf_counter()
        report = ait.tune(wrapped, samples, batch_sizes=[1, 2, 4, 8])
        tune_s = time.perf_counter() - started
    cache = ait.config.cache_dir.expanduser().absolute()
    usage = scan(cache)
    return {
        "seed": seed,
        "tune_s": tune_s,
        "serving_bytes": cache_size(cache),
        "parts_mb": {part: round(usage.part_size(part) / MIB, 2) for part in PARTS},
        "evicted": [(e["what"], e["size_mb"]) for e in events if e["event"] == "cache evicted"],
        "cleaned": [(e["what"], e["size_mb"]) for e in events if e["event"] == "cache cleaned"],
        "over_cap": [e.get("held_mb") for e in events if e["event"] == "cache over its cap"],
        "rows": [(c.backend, c.status) for g in report.graphs for c in g.candidates],
    }


def _tune_in_new_process(seed: int, folder: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "AITUNE_CACHE_DIR": str(folder / "aitune"),
        "AITUNE_CACHE_MAX_MB": str(CAP_MB),
        "AITUNE_PLUGINS": os.environ.get("AITUNE_PLUGINS", PLUGINS),
        "AITUNE_LOG_LEVEL": "info",
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(folder / "inductor")),
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "bench.cache_bound", "--child", str(seed)]
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"cache_bound child failed:\n{completed.stderr[-4000:]}")
    measured: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    measured["after_exit_bytes"] = cache_size(folder / "aitune")
    return measured


def run(options: Options) -> list[Result]:
    tunes = int(os.environ.get("AITUNE_BENCH_TUNES", 0)) or options.rounds(20, 3)
    runs = []
    with tempfile.TemporaryDirectory(prefix="aitune-cache-bound-") as folder:
        for seed in range(tunes):
            measured = _tune_in_new_process(seed, Path(folder))
            runs.append(measured)
            print(
                f"tune {seed + 1}/{tunes}: {measured['serving_bytes'] / MIB:.1f} MiB while serving, "
                f"{measured['after_exit_bytes'] / MIB:.1f} MiB after exit, {len(measured['evicted'])} evicted, "
                f"{measured['tune_s']:.0f} s; parts {measured['parts_mb']}",
                flush=True,
            )
    serving = [m["serving_bytes"] / MIB for m in runs]
    after = [m["after_exit_bytes"] / MIB for m in runs]
    evicted = sum(len(m["evicted"]) for m in runs)
    cleaned = sum(len(m["cleaned"]) for m in runs)
    name = f"cache, {tunes} tunes of the demo CNN (new weights each), cap {CAP_MB} MiB"
    note = f"max {max(serving):.1f} MiB; {evicted} evictions and {cleaned} cleanings logged"
    return [
        Result(name, "while serving", Stats.of(serving), "MiB", note=note, extra={"runs": runs}),
        Result(name, "largest while serving", Stats.of([max(serving)]), "MiB", target=CAP_MB),
        Result(name, "after each process ended", Stats.of(after), "MiB", note=f"max {max(after):.1f} MiB"),
        Result(f"tune(), demo CNN, plugins {PLUGINS}", "each", Stats.of([m["tune_s"] for m in runs]), "s"),
    ]


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--child":
        sys.exit("python -m bench.cache_bound --child SEED runs one tune(); the bench is `python -m bench cache_bound`")
    print(json.dumps(_child(int(sys.argv[2]))))
