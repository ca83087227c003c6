"""Timing helpers shared by every bench suite.

A measurement is repeated in *rounds*. Within a round every variant is measured once,
in an order that rotates from round to round, so slow drift of the machine (frequency,
other processes, caches) spreads over all variants instead of favouring one. Results
are reported as the median with the 10th and 90th percentiles as the spread.
"""

from __future__ import annotations

import datetime as _dt
import gc
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from aitune_core.profiling.idle import wait_until_idle

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).resolve().parent / "results"

UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9, "MiB": 1.0, "req/s": 1.0, "requests": 1.0, "x": 1.0}
"""Scale from what a Result holds (seconds; MiB for sizes) to its unit."""


# ---------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def spread(values: Sequence[float]) -> tuple[float, float]:
    """The 10th and 90th percentiles."""
    return percentile(values, 10), percentile(values, 90)


@dataclass(frozen=True)
class Stats:
    """Summary of repeated measurements, in seconds."""

    median: float
    p10: float
    p90: float
    runs: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        p10, p90 = spread(values)
        return cls(median(values), p10, p90, len(values))


def paired_differences(values: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Round-by-round ``values[i] - baseline[i]``: an overhead measured against a baseline
    taken in the same round, which cancels drift between rounds."""
    if len(values) != len(baseline):
        raise ValueError("paired measurements need the same number of rounds")
    return [a - b for a, b in zip(values, baseline, strict=True)]


# ---------------------------------------------------------------------- measuring


def per_call(fn: Callable[[], Any], number: int) -> float:
    """Seconds per call of ``fn``, averaged over ``number`` back-to-back calls."""
    loop = itertools.repeat(None, number)
    start = time.perf_counter()
    for _ in loop:
        fn()
    return (time.perf_counter() - start) / number


def calibrate(fn: Callable[[], Any], target_s: float = 0.02, max_number: int = 1_000_000) -> int:
    """How many calls of ``fn`` make one measurement last about ``target_s`` seconds."""
    number = 1
    while number < max_number:
        elapsed = per_call(fn, number) * number
        if elapsed >= target_s / 4:
            return max(1, min(max_number, int(number * target_s / max(elapsed, 1e-9))))
        number *= 4
    return max_number


def alternate(
    variants: Mapping[str, Callable[[], float]],
    rounds: int,
    warmup_rounds: int = 1,
    collect_between: bool = True,
) -> dict[str, list[float]]:
    """Measure every variant once per round, rotating the order each round.

    Each variant is a callable that takes one measurement and returns it in seconds
    (``lambda: per_call(fn, number)`` for a hot loop, or a function that does its own
    set-up and times only the part of interest). Warm-up rounds are run and dropped.
    ``collect_between`` runs the garbage collector before each measurement so that one
    variant's garbage is not collected on another's clock, and waits until the last
    variant's thread pools stop spinning (:func:`~aitune_core.profiling.idle.wait_until_idle`),
    so that each is measured with the cores it has when it serves alone.
    """
    names = list(variants)
    results: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(warmup_rounds + rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            if collect_between:
                gc.collect()
                wait_until_idle()
            value = variants[name]()
            if round_index >= warmup_rounds:
                results[name].append(value)
    return results


def paired_ratios(
    first: Callable[[], Any], second: Callable[[], Any], pairs: int, target_s: float = 0.01
) -> list[float]:
    """Per pair, ``first``'s seconds per call over ``second``'s, the two measured back to back.

    Medians taken over separate rounds keep the machine's drift between rounds: two
    runs of one ONNX Runtime callable under two names differed by up to 7% that way
    (docs/benchmarks.md). Two measurements a few milliseconds apart share the machine's
    state, so their ratio does not; the order alternates from pair to pair, so going
    first favours neither. Each measurement lasts about ``target_s``.
    """
    number = max(1, calibrate(first, target_s=target_s))
    ratios = []
    for index in range(pairs):
        if index % 2:
            b = per_call(second, number)
            a = per_call(first, number)
        else:
            a = per_call(first, number)
            b = per_call(second, number)
        ratios.append(a / b)
    return ratios


def median_interval(values: Sequence[float], z: float = 1.645) -> tuple[float, float]:
    """A 90% confidence interval of the median (``z`` = 1.645), from the order statistics.

    Distribution-free: the ranks ``n/2 -+ z*sqrt(n)/2`` bound the median with that
    confidence whatever the values' distribution (the binomial's normal approximation).
    """
    ordered = sorted(values)
    n = len(ordered)
    half = z * math.sqrt(n) / 2
    low = max(0, math.floor(n / 2 - half))
    high = min(n - 1, math.ceil(n / 2 + half) - 1)
    return ordered[low], ordered[high]


def run_python(code: str, runs: int, env: Mapping[str, str] | None = None) -> list[float]:
    """Run ``python -c code`` in ``runs`` fresh processes; each must print one number."""
    values = []
    full_env = {**os.environ, **(env or {})}
    for _ in range(runs):
        completed = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=full_env, capture_output=True, text=True, check=False
        )
        if completed.returncode != 0:
            raise RuntimeError(f"benchmark subprocess failed:\n{completed.stderr}")
        values.append(float(completed.stdout.strip().splitlines()[-1]))
    return values


# ---------------------------------------------------------------------- results


@dataclass
class Result:
    """One reported number: a summary of repeated measurements, with its unit and target."""

    name: str
    variant: str
    stats: Stats
    unit: str = "us"
    target: float | None = None  # in ``unit``; the median must not exceed it
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def scaled(self, value: float) -> float:
        return value * UNITS[self.unit]

    @property
    def meets_target(self) -> bool | None:
        if self.target is None:
            return None
        return self.scaled(self.stats.median) <= self.target

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "variant": self.variant,
            "unit": self.unit,
            "median": self.scaled(self.stats.median),
            "p10": self.scaled(self.stats.p10),
            "p90": self.scaled(self.stats.p90),
            "runs": self.stats.runs,
            "target": self.target,
            "meets_target": self.meets_target,
            "note": self.note,
            **({"extra": self.extra} if self.extra else {}),
        }


@dataclass
class Ratio(Result):
    """A dimensionless number (a speed ratio, a share of runs); ``passed`` is the verdict, if any."""

    unit: str = "x"
    passed: bool | None = None

    def scaled(self, value: float) -> float:
        return value

    @property
    def meets_target(self) -> bool | None:
        return self.passed


@dataclass
class Options:
    """Settings every suite receives from the runner."""

    quick: bool = False
    threads: int = 1
    """torch CPU threads for every measurement (one by default: the machines are shared)."""

    def rounds(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def _number(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_table(results: Sequence[Result]) -> str:
    rows = []
    for result in results:
        verdict = {None: "", True: "ok", False: "OVER"}[result.meets_target]
        target = "" if result.target is None else f"<= {_number(result.target)} {result.unit} {verdict}"
        rows.append(
            [
                result.name,
                result.variant,
                f"{_number(result.scaled(result.stats.median))} {result.unit}",
                f"{_number(result.scaled(result.stats.p10))} .. {_number(result.scaled(result.stats.p90))}",
                result.stats.runs,
                target,
                result.note,
            ]
        )
    return tabulate(
        rows,
        headers=["measurement", "variant", "median", "p10 .. p90", "runs", "target", "note"],
        tablefmt="simple",
        disable_numparse=True,
    )


def environment() -> dict[str, Any]:
    """What the numbers were measured on."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        info["git_commit"] = commit
        info["git_dirty"] = bool(dirty)
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def today() -> str:
    return _dt.datetime.now().astimezone().date().isoformat()


def write_results(suite: str, results: Sequence[Result], directory: Path = RESULTS_DIR) -> Path:
    """Write ``<directory>/<YYYY-MM-DD>-<suite>.json``, or ``<YYYY-MM-DD>.json`` for a whole run
    (``suite=""``), replacing one from earlier that day."""
    now = _dt.datetime.now().astimezone()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (f"{now.date().isoformat()}-{suite}.json" if suite else f"{now.date().isoformat()}.json")
    payload = {
        "suite": suite or "all",
        "timestamp": now.isoformat(timespec="seconds"),
        "environment": environment(),
        "results": [result.to_dict() for result in results],
    }
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(payload, indent=2) + "\n")
    temporary.replace(path)
    return path


__all__ = [
    "RESULTS_DIR",
    "Options",
    "Result",
    "Stats",
    "alternate",
    "calibrate",
    "format_table",
    "median",
    "paired_differences",
    "per_call",
    "percentile",
    "run_python",
    "spread",
    "write_results",
]
