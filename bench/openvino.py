"""OpenVINO vs ONNX Runtime vs Inductor on the same models: each raw runtime by hand, and aitune with all three.

For each bundled demo model (DemoCNN, DemoMLP, DemoTransformer) and each batch size it
is tuned at, six variants run in one process, measured in alternating rounds
(``bench.timing.alternate``), on ``--threads`` threads (one by default):

* eager: the model itself;
* OpenVINO: ``torch.export`` with a dynamic batch, ``ov.convert_model`` of the program
  with the batch range as ``ov.Dimension``, ``core.compile_model(..., "CPU")`` with the
  properties a user who wants float32's numbers sets (``INFERENCE_PRECISION_HINT`` f32,
  ``PERFORMANCE_HINT`` LATENCY, ``INFERENCE_NUM_THREADS``), called as its docs show:
  ``compiled(x.numpy(), share_inputs=True)[0]``;
* OpenVINO (throughput hint): the same compiled with ``PERFORMANCE_HINT`` THROUGHPUT,
  which is what decides the backend's default hint;
* ORT: ``torch.onnx.export(..., dynamo=True)`` with a dynamic batch and an ONNX Runtime
  CPU session, as :mod:`bench.onnx` deploys it;
* AOTI: ``torch.export`` with a dynamic batch, ``aoti_compile_and_package``,
  ``aoti_load_package``;
* aitune: the model wrapped in ``aitune_core.Module`` and tuned by MaxThroughputStrategy
  over OpenVINOBackend, ONNXRuntimeBackend, TorchInductorAotBackend and eager at those
  batch sizes; calls go through aitune's routing, as a user's would.

Reported per model and batch size: median milliseconds per call, speedup over eager,
what aitune routed that size to, and aitune's time as a fraction of the best of the
three raw runtimes (target >= 0.95). That fraction is measured apart from the rounds:
aitune and each raw runtime in 200 back-to-back pairs (``bench.timing.paired_ratios``),
the best being the runtime whose paired median is lowest, with a 90% interval of that
median. Ratios of the rounds' medians are kept beside it (``ratio_of_medians``).
With ``AITUNE_BENCH_LOAD=1`` everything, tuning
included, runs beside two bursty CPU neighbours (:mod:`bench.neighbours`).

``python -m bench openvino`` runs it as a registered suite; ``python -m bench.openvino
[--threads N] [--quick] [--models cnn,mlp]`` alone.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tabulate import tabulate

from bench import backend_report
from bench.neighbours import bursty_neighbours, load_wanted
from bench.onnx import _raw_ort
from bench.timing import Options, Result, Stats, median, median_interval, paired_ratios

TUNED_SIZES = {"cnn": [1, 8, 32], "mlp": [1, 16, 64], "transformer": [1, 4, 16]}
RAW = ("OpenVINO", "ORT", "AOTI")
TARGET = backend_report.AITUNE_TARGET
_names = itertools.count()


def _raw_openvino(model: torch.nn.Module, example: torch.Tensor, high: int, threads: int, hint: str) -> Any:
    import openvino as ov
    import openvino.properties as props
    import openvino.properties.hint as hints
    from torch.export import Dim

    dims = ({0: Dim("batch", min=1, max=high)},)
    with torch.no_grad():
        program = torch.export.export(model, (example,), dynamic_shapes=dims)
    shape = ov.PartialShape([ov.Dimension(1, high), *example.shape[1:]])
    converted = ov.convert_model(program, input=[shape])
    config = {
        hints.inference_precision(): ov.Type.f32,
        hints.performance_mode(): getattr(hints.PerformanceMode, hint),
        props.inference_num_threads(): threads,
    }
    compiled = ov.Core().compile_model(converted, "CPU", config)

    def run(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(compiled(x.numpy(), share_inputs=True)[0])

    return run


def _raw_aoti(model: torch.nn.Module, example: torch.Tensor, high: int, folder: Path) -> Any:
    import torch._inductor
    from torch.export import Dim

    dims = ({0: Dim("batch", min=1, max=high)},)
    with torch.no_grad():
        program = torch.export.export(model, (example,), dynamic_shapes=dims)
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(folder / f"raw-{next(_names)}.pt2"))
    return torch._inductor.aoti_load_package(path)


def _paired_with_aitune(deployed: dict[str, Any], batch: torch.Tensor, pairs: int) -> dict[str, Any]:
    """Each raw runtime's time over aitune's, measured in back-to-back pairs (``bench.timing.paired_ratios``)."""
    found = {}
    with torch.no_grad():
        for variant in RAW:
            ratios = paired_ratios(lambda v=variant: deployed[v](batch), lambda: deployed["aitune"](batch), pairs)
            found[variant] = {"median": median(ratios), "interval": median_interval(ratios), "pairs": pairs}
    return found


def bench_model(
    name: str, sizes: list[int], threads: int, rounds: int, folder: Path, pairs: int = 200
) -> dict[str, Any]:
    """One demo model: deployed by hand three ways and tuned by aitune, then timed at each of ``sizes``."""
    from aitune_inductor import TorchInductorAotBackend
    from aitune_onnx import ONNXRuntimeBackend
    from aitune_openvino import OpenVINOBackend

    import aitune_core as ait
    from aitune_core.demo.models import build_demo

    model, samples = build_demo(name)
    high = max(sizes)
    example = torch.stack([samples[i % len(samples)] for i in range(max(2, sizes[len(sizes) // 2]))])
    deployed: dict[str, Callable[[torch.Tensor], Any]] = {
        "eager": model,
        "OpenVINO": _raw_openvino(copy.deepcopy(model), example, high, threads, "LATENCY"),
        "OpenVINO (throughput hint)": _raw_openvino(copy.deepcopy(model), example, high, threads, "THROUGHPUT"),
        "ORT": _raw_ort(copy.deepcopy(model), torch.stack([samples[0]] * high), folder, threads),
        "AOTI": _raw_aoti(copy.deepcopy(model), example, high, folder),
    }
    wrapped = ait.Module(copy.deepcopy(model), f"bench-openvino-{name}-{next(_names)}")
    backends = [OpenVINOBackend(), ONNXRuntimeBackend(), TorchInductorAotBackend(), ait.TorchEagerBackend()]
    strategy = ait.MaxThroughputStrategy(backends=backends, profile=ait.ProfileConfig(max_batch_search=False))
    report = ait.tune(wrapped, samples, batch_sizes=sizes, strategy=strategy)
    deployed["aitune"] = wrapped
    graph = report.graphs[0]
    results: dict[str, Any] = {"sizes": {}, "candidates": {c.backend: c.status for c in graph.candidates}}
    for size in sizes:
        batch = torch.stack([samples[i % len(samples)] for i in range(size)])
        with torch.no_grad():
            expected = model(batch)
            for variant, run in deployed.items():
                if not torch.allclose(run(batch), expected, rtol=1e-3, atol=1e-3):
                    raise AssertionError(f"{name} batch {size}: {variant} does not match eager")
        times = backend_report.measure_variants(deployed, batch, rounds)
        medians = {variant: median(values) for variant, values in times.items()}
        paired = _paired_with_aitune(deployed, batch, pairs)
        best = min(RAW, key=lambda variant: paired[variant]["median"])
        serving = graph.serving_at(size)
        results["sizes"][size] = {
            "medians_ms": {variant: value * 1e3 for variant, value in medians.items()},
            "speedup_vs_eager": {variant: medians["eager"] / value for variant, value in medians.items()},
            "best_raw": best,
            "aitune_vs_best_raw": paired[best]["median"],
            "aitune_vs_best_raw_interval": paired[best]["interval"],
            "paired_vs_aitune": paired,
            "ratio_of_medians": {variant: medians[variant] / medians["aitune"] for variant in RAW},
            "routed_to": serving.backend.split("(")[0] if serving is not None else "eager",
            "_times": times,
        }
    return results


def measure_all(threads: int = 1, rounds: int = 15, models: list[str] | None = None) -> dict[str, Any]:
    """Every model at each of its tuned sizes; raw seconds under ``_times``."""
    names = models or list(TUNED_SIZES)
    for package in ("aitune_openvino", "aitune_onnx", "aitune_inductor"):
        backend_report.plugin_on_path(package)
    loaded = load_wanted()
    with bursty_neighbours() if loaded else contextlib.nullcontext():

        def run_models(folder: Path) -> dict[str, Any]:
            return {name: bench_model(name, TUNED_SIZES[name], threads, rounds, folder) for name in names}

        results = backend_report.measure_all("openvino", threads, run_models)
    results["load"] = "two bursty neighbours" if loaded else "quiet"
    return results


def table(results: dict[str, Any]) -> str:
    variants = ["eager", "OpenVINO", "OpenVINO (throughput hint)", "ORT", "AOTI", "aitune"]
    rows = []
    for name, model in results["models"].items():
        for size, numbers in model["sizes"].items():
            medians = numbers["medians_ms"]
            rows.append(
                [
                    name,
                    size,
                    *(f"{medians[v]:.3f} ({numbers['speedup_vs_eager'][v]:.2f}x)" for v in variants),
                    numbers["routed_to"],
                    f"{numbers['aitune_vs_best_raw']:.3f} of {numbers['best_raw']} "
                    f"[{numbers['aitune_vs_best_raw_interval'][0]:.3f}-{numbers['aitune_vs_best_raw_interval'][1]:.3f}]",
                ]
            )
    headers = ["model", "batch", *(f"{v} ms" for v in variants), "aitune routes to", "aitune vs best raw"]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def as_results(results: dict[str, Any]) -> list[Result]:
    rows = []
    for name, model in results["models"].items():
        for size, numbers in model["sizes"].items():
            for variant, values in numbers["_times"].items():
                note = f"{numbers['speedup_vs_eager'][variant]:.2f}x eager"
                if variant == "aitune":
                    note += (
                        f", routed to {numbers['routed_to']}, {numbers['aitune_vs_best_raw']:.3f} of "
                        f"{numbers['best_raw']} (target >= {TARGET})"
                    )
                extra: dict[str, Any] = {"threads": results["threads"], "load": results["load"]}
                if variant == "aitune":
                    extra["vs_best_raw_interval"] = numbers["aitune_vs_best_raw_interval"]
                    extra["paired_vs_aitune"] = numbers["paired_vs_aitune"]
                    extra["ratio_of_medians"] = numbers["ratio_of_medians"]
                rows.append(Result(f"{name} batch {size}", variant, Stats.of(values), "ms", None, note, extra=extra))
    return rows


def run(options: Options) -> list[Result]:
    """The ``python -m bench openvino`` entry: the table printed, the rows returned."""
    results = measure_all(options.threads, rounds=options.rounds(15, 5))
    print(table(results), flush=True)
    return as_results(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.openvino", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch, OpenVINO and ONNX Runtime threads")
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run, not numbers to quote")
    parser.add_argument("--models", default="", help=f"comma-separated subset of {', '.join(TUNED_SIZES)}")
    args = parser.parse_args(argv)
    models = [name for name in args.models.split(",") if name] or None
    results = measure_all(args.threads, rounds=5 if args.quick else 15, models=models)
    print(f"load: {results['load']}, threads: {results['threads']}")
    print(table(results), flush=True)
    below = [
        f"{name} batch {size}"
        for name, model in results["models"].items()
        for size, numbers in model["sizes"].items()
        if numbers["aitune_vs_best_raw"] < TARGET
    ]
    if below:
        print(f"aitune below {TARGET} of the best raw runtime at: {', '.join(below)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
