"""Load plus first calls of a JIT checkpoint: ``examples/gpt2_greedy``, precompiled or compiled where loaded.

The example tunes a two-layer GPT-2 (prefill and decode both served by Inductor JIT)
and saves it, once with ``precompile=True`` (the example's default) and once with
``--no-precompile`` (a JIT checkpoint that carries only Inductor's compile cache). Each
tune starts cold: new, empty aitune and Inductor caches. Each checkpoint is then loaded
by the example's own deploy step in fresh processes, each with a new, empty
``TORCHINDUCTOR_CACHE_DIR``, the variants alternating round by round; with
``AITUNE_BENCH_LOAD=1`` beside bursty CPU neighbours (:mod:`bench.neighbours`). Two
settings: the machine's aitune cache as an earlier process left it (it records the
check of the CPU's vector features, made once per machine), and a new, empty one too
(a machine that never ran aitune: that check runs again, loading the probe programs
the checkpoint carries). Read from the example's output: the
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
_LOADED = re.compile(r"loaded in ([0-9.]+) s")
_FIRST = re.compile(r"first calls: prefill ([0-9.]+) ms, decode ([0-9.]+) ms: Dynamo traced (\d+) frame")
_TUNED = re.compile(r"tuned in ([0-9.]+) s")
_STEP = re.compile(r"decode step, .*: eager ([0-9.]+) ms, aitune ([0-9.]+) ms")


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


def _deploy(out: Path, root: Path, name: str, threads: int, aitune_cache: str | None = None) -> dict[str, Any]:
    """The example's deploy step in a new process and a new Inductor cache; the aitune cache ``aitune_cache``
    (a name under ``root``) or a new one."""
    command = [sys.executable, str(EXAMPLE), "deploy", str(out), "--threads", str(threads)]
    environment = _environment(root, name, threads)
    if aitune_cache is not None:
        environment["AITUNE_CACHE_DIR"] = str(root / f"aitune-{aitune_cache}")
    started = time.perf_counter()
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
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
        "decode_step_vs_eager": _decode_speedup(done.stdout),
        "process_s": process_s,
    }


def _decode_speedup(output: str) -> float | None:
    """Eager's decode step over aitune's, as the example measured it after the checks (None if it did not)."""
    step = _STEP.search(output)
    return float(step.group(1)) / float(step.group(2)) if step else None


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
        variants = {
            "precompiled": (True, True),
            "precompiled, new aitune cache": (True, False),
            "compile cache only": (False, True),
        }
        _deploy(checkpoints[True], root, "machine", options.threads)  # the machine's aitune cache, as a user has it
        measured: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        neighbours = bursty_neighbours() if loaded else contextlib.nullcontext()
        with neighbours:
            for index in range(rounds):
                names = list(variants) if index % 2 == 0 else list(reversed(variants))
                for name in names:
                    precompile, machine = variants[name]
                    run = _deploy(
                        checkpoints[precompile],
                        root,
                        f"deploy-{index}-{list(variants).index(name)}",
                        options.threads,
                        "machine" if machine else None,
                    )
                    measured[name].append(run)
    where = "beside bursty neighbours" if loaded else "quiet"
    for name, runs in measured.items():
        firsts = [run["load_s"] + run["prefill_s"] + run["decode_s"] for run in runs]
        extra = {"runs": runs, "load": where}
        speedups = sorted(run["decode_step_vs_eager"] or 0.0 for run in runs)
        note = (
            f"Dynamo frames {sorted({run['frames'] for run in runs})}, tokens identical: "
            f"{all(run['identical'] for run in runs)}, decode step {speedups[len(speedups) // 2]:.2f}x eager, {where}"
        )
        results.append(
            Result(
                "gpt2_greedy, load + first prefill + first decode",
                name,
                Stats.of(firsts),
                "s",
                TARGET_S if name == "precompiled" else None,
                note,
                extra,
            )
        )
    return results
