"""What the backend suites (inductor, onnx) share: measuring each model the same way, one table, one JSON shape.

A suite's ``measure_all(threads, rounds)`` returns ``{"threads": n, "models": {name: model}}``
where each model holds ``batch_size``, ``selected``, ``best_raw`` (the fastest raw
variant), ``aitune_vs_best_raw``, per variant the median, spread, throughput and speedup
under ``variants``, and the raw seconds under ``_times``.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import itertools
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

from bench.timing import Options, Result, Stats, alternate, calibrate, median, per_call

AITUNE_TARGET = 0.95
MeasureAll = Callable[..., dict[str, Any]]
Variant = Callable[[torch.Tensor], Any]
RawVariant = Callable[[torch.nn.Module, torch.Tensor], Variant]
"""Deploys a copy of a model for one batch by hand, as a user without aitune would."""
_names = itertools.count()


def plugin_on_path(package: str) -> None:
    """Let a suite run from a source checkout where its plugin is not installed."""
    try:
        importlib.import_module(package)
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / package))


def measure_all(suite: str, threads: int, models: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``models(folder)`` with the suite's plugin importable, ``threads`` torch threads and a scratch cache."""
    plugin_on_path(f"aitune_{suite}")
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix=f"bench-{suite}-") as folder:
        import aitune_core as ait

        previous_cache = ait.config.cache_dir
        ait.config.cache_dir = Path(folder) / "aitune-cache"
        try:
            return {"threads": threads, "target": AITUNE_TARGET, "models": models(Path(folder))}
        finally:
            ait.config.cache_dir = previous_cache


def bench_model(
    suite: str, name: str, batch_size: int, raw: dict[str, RawVariant], backends: list[Any], rounds: int
) -> dict[str, Any]:
    """A demo model at ``batch_size``: eager, each ``raw`` deployment, and aitune tuned over ``backends`` and eager."""
    import aitune_core as ait
    from aitune_core.demo.models import build_demo

    model, samples = build_demo(name)
    batch = torch.stack([samples[i % len(samples)] for i in range(batch_size)])
    with torch.no_grad():
        expected = model(batch)
    variants: dict[str, Variant] = {"eager": model}
    variants.update({variant: deploy(copy.deepcopy(model), batch) for variant, deploy in raw.items()})
    wrapped = ait.Module(copy.deepcopy(model), f"bench-{suite}-{name}-{next(_names)}")
    strategy = ait.MaxThroughputStrategy(
        backends=[*backends, ait.TorchEagerBackend()], profile=ait.ProfileConfig(max_batch_search=False)
    )
    sizes = [batch_size // 4, batch_size // 2, batch_size]
    report = ait.tune(wrapped, samples, batch_sizes=sizes, strategy=strategy)
    variants["aitune"] = wrapped
    with torch.no_grad():
        for variant, fn in variants.items():
            if not torch.allclose(fn(batch), expected, rtol=1e-3, atol=1e-3):
                raise AssertionError(f"{name}: {variant} does not match eager")
    times = measure_variants(variants, batch, rounds)
    medians = {variant: median(values) for variant, values in times.items()}
    best_raw = min(raw, key=lambda variant: medians[variant])
    selected = report.graphs[0].selected
    return {
        "batch_size": batch_size,
        "selected": selected.backend if selected is not None else None,
        "variants": {
            variant: {
                "median_ms": medians[variant] * 1e3,
                "throughput": batch_size / medians[variant],
                "speedup_vs_eager": medians["eager"] / medians[variant],
                "p10_ms": Stats.of(times[variant]).p10 * 1e3,
                "p90_ms": Stats.of(times[variant]).p90 * 1e3,
                "runs": len(times[variant]),
            }
            for variant in variants
        },
        "best_raw": best_raw,
        "aitune_vs_best_raw": medians[best_raw] / medians["aitune"],
        "_times": times,
    }


def measure_variants(
    variants: dict[str, Variant], batch: torch.Tensor, rounds: int, target_s: float = 0.1
) -> dict[str, list[float]]:
    """Seconds per call of each variant on ``batch``, alternating variants round by round.

    ``target_s``: how long one timed run of calls lasts; the number of calls is calibrated to it.
    """

    def timer(fn: Variant) -> Callable[[], float]:
        def call() -> Any:
            return fn(batch)

        with torch.no_grad():
            number = calibrate(call, target_s=target_s)

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
