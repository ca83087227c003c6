"""Each variant timed alone, in a process of its own: what a deployment of that variant sees.

The selection bench times the tuned module, eager and every single backend in one
process, alternating. A deployment holds one of them: the other runtimes' thread pools
are not there at all, let alone spinning or asleep. So, for the model the selection
criterion is about, the tuned module and each single backend are saved as checkpoints,
and each is loaded and timed in a fresh process, alone, in turns (eager too, rebuilt
from the same seed). The quality computed from these times is the deployment truth
that the in-process one is checked against.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.timing import calibrate, per_call

MARK = "ALONE-RESULT "
EAGER = "eager"
ALONE_TIMEOUT_S = 600
"""One variant's load and timing in its fresh process, at most."""
TUNED = "aitune"


def save_variants(wrapped: Any, singles: dict[str, Any], folder: Path) -> dict[str, str]:
    """Checkpoints of the tuned module and of each single backend; their paths by variant name."""
    import aitune_core as ait

    paths = {TUNED: ait.save(wrapped, folder / "aitune")}
    for index, (label, alone) in enumerate(singles.items()):
        paths[label] = ait.save(alone, folder / f"single-{index}")
    return {label: str(path) for label, path in paths.items()}


def time_alone(job: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: build the model, load one variant's checkpoint, time it at every size."""
    import torch

    import aitune_core as ait
    from bench.selection import _batch, make_model

    torch.set_num_threads(job["threads"])
    ait.config.cache_dir = job["cache_dir"]
    model, samples = make_model(job["model"])
    served = model if job["path"] is None else ait.load(model, job["path"], trust_native_code=True)
    medians: dict[str, float] = {}
    with torch.no_grad():
        for size in job["batch_sizes"]:
            x = _batch(samples, size)
            for _ in range(5):
                served(x)
            number = calibrate(lambda x=x: served(x), target_s=0.05)
            values = [per_call(lambda x=x: served(x), number) for _ in range(job["rounds"])]
            medians[str(size)] = statistics.median(values)
    return {"medians": medians}


def measure(paths: dict[str, str], job: dict[str, Any], turns: int = 2) -> dict[str, dict[str, float]]:
    """Each variant's median seconds per call by batch size, each alone in its own processes.

    Variants take ``turns`` turns, the order reversed every other turn, so that a drift of
    the machine over the minutes this takes does not favour whoever goes first.
    """
    from bench.selection import _spawn  # the suite's own job runner (that module imports this one)

    variants = {EAGER: None, **paths}
    names = list(variants)
    seen: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for turn in range(turns):
        for name in names if turn % 2 == 0 else reversed(names):
            answer, _ = _spawn({**job, "kind": "alone", "path": variants[name]}, timeout_s=ALONE_TIMEOUT_S)
            for size, value in answer["medians"].items():
                seen[name].setdefault(size, []).append(value)
    return {name: {size: statistics.median(v) for size, v in sizes.items()} for name, sizes in seen.items()}


def quality(medians: dict[str, dict[str, float]], size: str) -> tuple[float, str]:
    """The tuned module's speed over the fastest other variant's at ``size``, and that variant."""
    others = {name: by_size[size] for name, by_size in medians.items() if name != TUNED}
    best = min(others, key=lambda name: others[name])
    return others[best] / medians[TUNED][size], best


def describe(run: dict[str, Any]) -> str:
    """One line per run: the quality alone at each size, and every variant's time."""
    parts = []
    for size in run["timings"]:
        value, best = quality(run["alone"], size)
        times = ", ".join(f"{name} {by[size] * 1e3:.2f} ms" for name, by in run["alone"].items())
        parts.append(f"batch {size}: quality {value:.2f} against {best} ({times})")
    return "; ".join(parts)
