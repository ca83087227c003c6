"""Load plus first calls of a JIT checkpoint: ``examples/gpt2_greedy``, precompiled or compiled where loaded.

The example tunes a two-layer GPT-2 (prefill and decode both served by Inductor JIT)
and saves it, once with ``precompile=True`` (the example's default) and once with
``--no-precompile`` (a JIT checkpoint that carries only Inductor's compile cache). Each
tune starts cold: new, empty aitune and Inductor caches. Each checkpoint is then loaded
by the example's own deploy step, in fresh processes whose aitune and Inductor caches
are new and empty, the two checkpoints alternating; with ``AITUNE_BENCH_LOAD=1`` beside
bursty CPU neighbours (:mod:`bench.neighbours`). Read from the example's output: the
load, the first prefill and decode calls, what Dynamo traced and Inductor compiled,
and whether the tokens matched eager's.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.neighbours import bursty_neighbours, load_wanted
from bench.timing import ROOT, Options, Result, Stats

TARGET_S = 2.0
"""Load plus first prefill and first decode call, #27's target for the example's checkpoint."""

EXAMPLE = ROOT / "examples" / "gpt2_greedy" / "gpt2_greedy.py"
_LOADED = re.compile(r"loaded in ([0-9.]+) s .*Dynamo traced (\d+) frame")
_FIRST = re.compile(r"first calls: prefill ([0-9.]+) ms, decode ([0-9.]+) ms: Dynamo traced (\d+) frame")
_TUNED = re.compile(r"tuned in ([0-9.]+) s")


def _environment(root: Path, name: str, threads: int) -> dict[str, str]:
    return {
        **os.environ,
        "AITUNE_CACHE_DIR": str(root / f"aitune-{name}"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / f"inductor-{name}"),
        "AITUNE_LOG_LEVEL": "error",
        "OMP_NUM_THREADS": str(threads),
    }


def _tune(root: Path, precompile: bool, threads: int) -> tuple[Path, float]:
    out = root / ("precompiled" if precompile else "compile-cache")
    command = [sys.executable, str(EXAMPLE), "--out", str(out), "--threads", str(threads)]
    command += [] if precompile else ["--no-precompile"]
    # The example loads the checkpoint itself afterwards; only its tuning half is kept here.
    done = subprocess.run(
        command, env=_environment(root, f"tune-{out.name}", threads), capture_output=True, text=True, check=False
    )
    tuned = _TUNED.search(done.stdout)
    if done.returncode != 0 or tuned is None:
        raise RuntimeError(f"tuning the example failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return out, float(tuned.group(1))


def _deploy(out: Path, root: Path, name: str, threads: int) -> dict[str, Any]:
    command = [sys.executable, str(EXAMPLE), "deploy", str(out), "--threads", str(threads)]
    started = time.perf_counter()
    done = subprocess.run(command, env=_environment(root, name, threads), capture_output=True, text=True, check=False)
    process_s = time.perf_counter() - started
    loaded, first = _LOADED.search(done.stdout), _FIRST.search(done.stdout)
    if done.returncode != 0 or loaded is None or first is None:
        raise RuntimeError(f"deploying the example failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return {
        "load_s": float(loaded.group(1)),
        "prefill_s": float(first.group(1)) / 1e3,
        "decode_s": float(first.group(2)) / 1e3,
        "frames": int(first.group(3)),
        "identical": "tokens identical: yes" in done.stdout,
        "process_s": process_s,
    }


def run(options: Options) -> list[Result]:
    try:
        import aitune_inductor  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return []
    rounds = options.rounds(3, 1)
    loaded = load_wanted()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-jit-load-") as folder:
        root = Path(folder)
        checkpoints = {}
        for precompile in (True, False):
            out, tuned_s = _tune(root, precompile, options.threads)
            checkpoints[precompile] = out
            name = "precompiled" if precompile else "compile cache only"
            results.append(Result("gpt2_greedy, cold tune", name, Stats.of([tuned_s]), "s"))
        measured: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
        neighbours = bursty_neighbours() if loaded else contextlib.nullcontext()
        with neighbours:
            for index in range(rounds):
                order = (True, False) if index % 2 == 0 else (False, True)
                for precompile in order:
                    name = f"deploy-{'p' if precompile else 'c'}-{index}"
                    measured[precompile].append(_deploy(checkpoints[precompile], root, name, options.threads))
    where = "beside bursty neighbours" if loaded else "quiet"
    for precompile, runs in measured.items():
        name = "precompiled" if precompile else "compile cache only"
        firsts = [run["load_s"] + run["prefill_s"] + run["decode_s"] for run in runs]
        extra = {"runs": runs, "load": where}
        note = (
            f"Dynamo frames {sorted({run['frames'] for run in runs})}, tokens identical: "
            f"{all(run['identical'] for run in runs)}, {where}"
        )
        results.append(
            Result(
                "gpt2_greedy, load + first prefill + first decode",
                name,
                Stats.of(firsts),
                "s",
                TARGET_S if precompile else None,
                note,
                extra,
            )
        )
    return results
