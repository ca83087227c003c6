"""torchao: eager, raw torchao int8 weight-only and int8 dynamic activation, and aitune with the torchao plugin.

On the bundled DemoMLP (512 -> 2048 -> 512, GELU), with ``torch.set_num_threads(1)``,
four variants run in one process, measured in alternating rounds
(``bench.timing.alternate``) at batch 1 (latency, memory-bound) and 64 (throughput,
compute-bound):

* eager: the model itself;
* int8wo: ``torchao.quantize_(copy, Int8WeightOnlyConfig())``, called directly;
* int8dq: ``torchao.quantize_(copy, Int8DynamicActivationInt8WeightConfig())``;
* aitune: the model wrapped in ``aitune_core.Module`` and tuned once, over batches 1,
  16 and 64, by MaxThroughputStrategy over TorchAOBackend int8wo, int8dq and eager;
  calls go through aitune's routing, as a user's calls would. Whichever it selects
  (at batch 64, the tuned maximum) serves both batch sizes.

Reported: median milliseconds per call, throughput, speed relative to eager, the max
abs error against eager, what aitune selected (with the throughputs and errors its
strategy measured while tuning), and aitune's throughput as a fraction of the best of
the three raw variants (target >= 0.95 at the tuned batch).

``python -m bench.torchao [--quick]`` runs it alone; ``python -m bench torchao`` runs it
as a registered suite.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
from collections.abc import Callable
from typing import Any

import torch
from tabulate import tabulate

from bench import backend_report
from bench.backend_report import AITUNE_TARGET
from bench.timing import Options, Result, Stats, median

BATCH_SIZES = (1, 64)
TUNE_BATCH_SIZES = [1, 16, 64]
RAW = ("eager", "int8wo", "int8dq")
_names = itertools.count()


def _raw(model: torch.nn.Module, preset: str) -> torch.nn.Module:
    """The model quantized by hand with torchao's own defaults, as a user without aitune would."""
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

    configs = {"int8wo": Int8WeightOnlyConfig, "int8dq": Int8DynamicActivationInt8WeightConfig}
    quantized = copy.deepcopy(model)
    quantize_(quantized, configs[preset](set_inductor_config=False))
    return quantized


def _aitune(model: torch.nn.Module, samples: list[torch.Tensor]) -> tuple[Any, Any]:
    from aitune_torchao import TorchAOBackend

    import aitune_core as ait

    wrapped = ait.Module(copy.deepcopy(model), f"bench-torchao-{next(_names)}")
    strategy = ait.MaxThroughputStrategy(
        backends=[TorchAOBackend(preset="int8wo"), TorchAOBackend(preset="int8dq"), ait.TorchEagerBackend()],
        profile=ait.ProfileConfig(max_batch_search=False),
    )
    report = ait.tune(wrapped, samples, batch_sizes=TUNE_BATCH_SIZES, strategy=strategy)
    return wrapped, report


def _tuning_rows(report: Any) -> list[dict[str, Any]]:
    """What the strategy measured for each candidate while tuning."""
    rows = []
    for candidate in report.graphs[0].candidates:
        measurement = candidate.measurement
        rows.append(
            {
                "backend": candidate.backend,
                "status": candidate.status,
                "throughput": measurement.throughput if measurement is not None else None,
                "batch_size": measurement.batch_size if measurement is not None else None,
                "speedup": candidate.speedup,
                "max_abs_error": candidate.max_abs_error,
                "max_rel_error": candidate.max_rel_error,
                "reason": candidate.reason,
            }
        )
    return rows


def measure_all(rounds: int = 15, threads: int = 1) -> dict[str, Any]:
    """Every batch size and variant; times kept raw (seconds) under ``_times`` for the suite runner."""
    backend_report.plugin_on_path("aitune_torchao")
    from aitune_core.demo.models import build_demo

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model, samples = build_demo("mlp")
        variants: dict[str, Callable[[torch.Tensor], Any]] = {
            "eager": model,
            "int8wo": _raw(model, "int8wo"),
            "int8dq": _raw(model, "int8dq"),
        }
        wrapped, report = _aitune(model, samples)
        variants["aitune"] = wrapped
        selected = report.graphs[0].selected
        results: dict[str, Any] = {
            "threads": threads,
            "target": AITUNE_TARGET,
            "selected": selected.backend if selected is not None else None,
            "tuning": _tuning_rows(report),
            "batches": {},
        }
        for size in BATCH_SIZES:
            batch = torch.stack([samples[i % len(samples)] for i in range(size)])
            with torch.no_grad():
                expected = model(batch)
                errors = {name: float((fn(batch) - expected).abs().max()) for name, fn in variants.items()}
            times = backend_report.measure_variants(variants, batch, rounds, target_s=0.05)
            medians = {name: median(values) for name, values in times.items()}
            best_raw = min(RAW, key=lambda name: medians[name])
            results["batches"][size] = {
                "variants": {
                    name: {
                        "median_ms": medians[name] * 1e3,
                        "p10_ms": Stats.of(times[name]).p10 * 1e3,
                        "p90_ms": Stats.of(times[name]).p90 * 1e3,
                        "throughput": size / medians[name],
                        "vs_eager": medians["eager"] / medians[name],
                        "max_abs_error": errors[name],
                        "runs": len(times[name]),
                    }
                    for name in variants
                },
                "best_raw": best_raw,
                "aitune_vs_best_raw": medians[best_raw] / medians["aitune"],
                "_times": times,
            }
        return results
    finally:
        torch.set_num_threads(previous_threads)


def table(results: dict[str, Any]) -> str:
    rows = []
    for size, batch in results["batches"].items():
        for name, numbers in batch["variants"].items():
            note = ""
            if name == "aitune":
                note = f"{batch['aitune_vs_best_raw']:.2f} of {batch['best_raw']}; runs {results['selected']}"
            rows.append(
                [
                    size,
                    name,
                    f"{numbers['median_ms']:.3f}",
                    f"{numbers['p10_ms']:.3f} .. {numbers['p90_ms']:.3f}",
                    f"{numbers['throughput']:.0f}",
                    f"{numbers['vs_eager']:.2f}x",
                    f"{numbers['max_abs_error']:.2g}",
                    note,
                ]
            )
    headers = ["batch", "variant", "median ms", "p10 .. p90 ms", "samples/s", "vs eager", "max abs err", "aitune"]
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    tuning = [
        [
            row["backend"],
            row["status"],
            f"{row['throughput']:.0f}" if row["throughput"] is not None else "-",
            f"{row['speedup']:.2f}x" if row["speedup"] is not None else "-",
            f"{row['max_abs_error']:.2g}" if row["max_abs_error"] is not None else "-",
            row["reason"][:70],
        ]
        for row in results["tuning"]
    ]
    headers = ["candidate (tuning, batch 64)", "status", "samples/s", "vs eager", "max abs err", "reason"]
    return text + "\n\n" + tabulate(tuning, headers=headers, tablefmt="simple", disable_numparse=True)


def _as_results(results: dict[str, Any]) -> list[Result]:
    """The same numbers as ``bench.timing.Result`` rows, for ``python -m bench``."""
    rows = []
    for size, batch in results["batches"].items():
        for name, values in batch["_times"].items():
            numbers = batch["variants"][name]
            note = f"{numbers['vs_eager']:.2f}x eager, max abs error {numbers['max_abs_error']:.2g}"
            if name == "aitune":
                note += f", {batch['aitune_vs_best_raw']:.2f} of {batch['best_raw']}, runs {results['selected']}"
            rows.append(
                Result(
                    f"DemoMLP batch {size}",
                    name,
                    Stats.of(values),
                    "ms",
                    None,
                    note,
                    extra={
                        "threads": results.get("threads", 1),
                        "selected": results["selected"],
                        "tuning": results["tuning"],
                    },
                )
            )
    return rows


def run(options: Options) -> list[Result]:
    """Measure and return ``bench.timing.Result`` rows (the ``python -m bench`` runner calls this)."""
    results = measure_all(rounds=options.rounds(15, 5), threads=options.threads)
    print(table(results), flush=True)
    return _as_results(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.torchao", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run, not numbers to quote")
    args = parser.parse_args(argv)
    results = measure_all(rounds=5 if args.quick else 15)
    print(table(results), flush=True)
    tuned = results["batches"][max(BATCH_SIZES)]
    if tuned["aitune_vs_best_raw"] < AITUNE_TARGET:
        print(f"aitune below {AITUNE_TARGET} of the best raw option at the tuned batch", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
