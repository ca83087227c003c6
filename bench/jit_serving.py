"""What a service feels while the JIT tunes: the JIT demo's loop as a service sees it, in fresh processes.

A script that never imports aitune serves the demo CNN at batch 4: 1,500 calls with
20 ms between them, at ``--threads`` intra-op threads (one by default). With
``--threads default`` the script never calls ``torch.set_num_threads``: it runs at
torch's own count, as an unmodified user script does. It runs twice in new interpreters: without
aitune, and with ``AITUNE_JIT=1`` and an empty cache (so the JIT records, tunes in the
background and swaps the winner in during the loop). Reported: p50, p99 and the
slowest call of each run, how much later than the plain run's p99 the JIT run's p99 is
(target: 5 ms), and whether the JIT run ended tuned. ``AITUNE_BENCH_LOAD=1`` runs both
beside two bursty CPU neighbours. The slowest calls of the JIT run are listed with
the aitune events logged just before them, which is where the time went.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.neighbours import bursty_neighbours, load_wanted
from bench.timing import ROOT, Options, Result, Stats, percentile

LATE_TARGET_MS = 5.0
MARK = "JIT-SERVING "

SCRIPT = """
import json, sys, time
import torch
from aitune_core.demo.models import DemoCNN  # the model's code only: the script never calls aitune

events = []
class Stamped(list):
    def append(self, record):
        super().append((time.perf_counter(), record.get("event"), record.get("backend") or record.get("where")))
sink = Stamped()
if "aitune_core.log" in sys.modules:
    sys.modules["aitune_core.log"]._listeners.append(sink)

torch.manual_seed(0)
SET_THREADS
model = DemoCNN().eval()
images = torch.randn(4, 3, 32, 32)
starts, took = [], []
with torch.no_grad():
    for call in range(CALLS):
        tick = time.perf_counter()
        model(images)
        took.append(time.perf_counter() - tick)
        starts.append(tick)
        time.sleep(GAP_S)
status = {}
if "aitune_jit" in sys.modules:
    status = {name: str(s) for name, s in sys.modules["aitune_jit"].status().items()}
print("MARK" + json.dumps({"took": took, "starts": starts, "events": list(sink), "status": status}), flush=True)
"""


def _environment(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AITUNE_")}
    env.update({"AITUNE_CACHE_DIR": str(work / "cache"), "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor")})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def torch_default_threads(work: Path) -> int:
    """The thread count torch picks by itself in a fresh serving script (this process may have set its own)."""
    probe = "import torch; print(torch.get_num_threads())"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=_environment(work), timeout=300, check=True
    )
    return int(done.stdout.split()[-1])


def _set_threads(threads: int, default: int) -> str:
    """The script's thread line: none at torch's own count (an unmodified script), else a set_num_threads call."""
    return "" if threads == default else f"torch.set_num_threads({threads})"


def _serve(jit: bool, calls: int, gap_s: float, work: Path, set_threads: str) -> dict[str, Any]:
    script = work / "serve.py"
    script.write_text(
        SCRIPT.replace("CALLS", str(calls))
        .replace("GAP_S", str(gap_s))
        .replace("MARK", MARK)
        .replace("SET_THREADS", set_threads)
    )
    env = _environment(work)
    if jit:
        env["AITUNE_JIT"] = "1"
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=1800, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"serving script failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len(MARK) :])
    result["stderr"] = done.stderr
    return result


def _slowest(run: dict[str, Any], count: int = 8) -> list[str]:
    """The slowest calls, each with the aitune events logged in the 0.5 s before it ended."""
    took, starts, events = run["took"], run["starts"], run["events"]
    lines = []
    for index in sorted(range(len(took)), key=lambda i: -took[i])[:count]:
        end = starts[index] + took[index]
        near = [f"{name}{f' ({what})' if what else ''}" for at, name, what in events if end - 0.5 <= at <= end]
        lines.append(f"call {index}: {took[index] * 1e3:.1f} ms; before it: {'; '.join(near[-4:]) or 'nothing logged'}")
    return lines


def run(options: Options) -> list[Result]:
    calls = options.rounds(1500, 300)
    loaded = load_wanted()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="aitune-bench-jit-serving-") as folder:
        default = torch_default_threads(Path(folder))
        set_threads = _set_threads(options.threads, default)
        threads = f"{options.threads} thread{'s' if options.threads != 1 else ''}"
        threads += " (torch's default, no set_num_threads)" if not set_threads else ""
        runs: dict[str, dict[str, Any]] = {}
        for name, jit in (("without aitune", False), ("AITUNE_JIT=1", True)):
            work = Path(folder) / name.replace(" ", "-").replace("=", "")
            work.mkdir()
            with bursty_neighbours() if loaded else _nothing():
                runs[name] = _serve(jit, calls, 0.02, work, set_threads)
        where = "beside two bursty neighbours" if loaded else "quiet"
        label = f"JIT serving loop, demo CNN batch 4, {calls} calls, 20 ms gaps, {threads}, {where}"
        for name, measured in runs.items():
            took = measured["took"]
            results += [
                Result(label, f"{name} p50", Stats.of([percentile(took, 50)]), "ms"),
                Result(label, f"{name} p99", Stats.of([percentile(took, 99)]), "ms"),
                Result(label, f"{name} max", Stats.of([max(took)]), "ms"),
            ]
        jit_run, plain = runs["AITUNE_JIT=1"], runs["without aitune"]
        late = percentile(jit_run["took"], 99) - percentile(plain["took"], 99)
        status = "; ".join(jit_run["status"].values()) or "the JIT did not start"
        results.append(Result(label, "p99 later than without aitune", Stats.of([late]), "ms", LATE_TARGET_MS, status))
        print("  slowest calls of the JIT run:\n    " + "\n    ".join(_slowest(jit_run)), flush=True)
    return results


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: Any) -> None:
        return None
