"""Reporting shared by the backend suites (inductor, onnx): one table, one JSON shape.

A suite's ``measure_all(threads, rounds)`` returns ``{"threads": n, "models": {name: model}}``
where each model holds ``batch_size``, ``selected``, ``best_raw`` (the fastest raw
variant), ``aitune_vs_best_raw``, per variant the median, spread, throughput and speedup
under ``variants``, and the raw seconds under ``_times``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import torch
from tabulate import tabulate

from bench.timing import Options, Result, Stats, alternate, calibrate, per_call

AITUNE_TARGET = 0.95
MeasureAll = Callable[..., dict[str, Any]]


def measure_variants(
    variants: dict[str, Callable[[torch.Tensor], Any]], batch: torch.Tensor, rounds: int
) -> dict[str, list[float]]:
    """Seconds per call of each variant on ``batch``, alternating variants round by round."""

    def timer(fn: Callable[[torch.Tensor], Any]) -> Callable[[], float]:
        def call() -> Any:
            return fn(batch)

        with torch.no_grad():
            number = calibrate(call, target_s=0.1)

        def measure() -> float:
            with torch.no_grad():
                return per_call(call, number)

        return measure

    return alternate({name: timer(fn) for name, fn in variants.items()}, rounds=rounds)


def table(results: dict[str, Any]) -> str:
    rows = []
    for name, model in results["models"].items():
        for variant, numbers in model["variants"].items():
            vs_raw = f"{model['aitune_vs_best_raw']:.3f} of {model['best_raw']}" if variant == "aitune" else ""
            rows.append(
                [
                    name,
                    model["batch_size"],
                    variant,
                    f"{numbers['median_ms']:.3f}",
                    f"{numbers['p10_ms']:.3f} .. {numbers['p90_ms']:.3f}",
                    f"{numbers['throughput']:.0f}",
                    f"{numbers['speedup_vs_eager']:.2f}x",
                    vs_raw,
                ]
            )
    headers = ["model", "batch", "variant", "median ms", "p10 .. p90 ms", "samples/s", "vs eager", "aitune vs best raw"]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def public(results: dict[str, Any]) -> dict[str, Any]:
    """The results without the raw times."""
    return {
        **results,
        "models": {
            name: {key: value for key, value in model.items() if not key.startswith("_")}
            for name, model in results["models"].items()
        },
    }


def as_results(results: dict[str, Any]) -> list[Result]:
    """The same numbers as ``bench.timing.Result`` rows, for ``python -m bench``."""
    rows = []
    for name, model in results["models"].items():
        for variant, values in model["_times"].items():
            note = f"{model['variants'][variant]['speedup_vs_eager']:.2f}x eager"
            if variant == "aitune":
                note += f", {model['aitune_vs_best_raw']:.3f} of {model['best_raw']} (target >= {AITUNE_TARGET})"
            extra = {"threads": results["threads"], "selected": model["selected"]}
            rows.append(
                Result(f"{name} batch {model['batch_size']}", variant, Stats.of(values), "ms", None, note, extra=extra)
            )
    return rows


def run(measure_all: MeasureAll, threads: int | Options) -> dict[str, Any] | list[Result]:
    """``run(threads)`` prints the table and returns the numbers; ``run(options)`` returns
    ``bench.timing.Result`` rows for the ``python -m bench`` runner."""
    if isinstance(threads, Options):
        return as_results(measure_all(threads.threads, rounds=threads.rounds(15, 5)))
    results = measure_all(threads)
    print(table(results), flush=True)
    return public(results)


def main(measure_all: MeasureAll, prog: str, description: str, threads_help: str, argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--threads", type=int, default=1, help=threads_help)
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run, not numbers to quote")
    args = parser.parse_args(argv)
    results = measure_all(args.threads, rounds=5 if args.quick else 15)
    print(table(results), flush=True)
    below = [name for name, model in results["models"].items() if model["aitune_vs_best_raw"] < AITUNE_TARGET]
    if below:
        print(f"aitune below {AITUNE_TARGET} of the best raw option: {', '.join(below)}", file=sys.stderr)
    return 0
