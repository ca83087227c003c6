"""ONNX Runtime: eager, a hand-written ONNX Runtime deployment, and aitune with the onnx plugin.

For each bundled demo model (DemoCNN, DemoMLP) at one batch size, three variants run in
one process, measured in alternating rounds (``bench.timing.alternate``):

* eager: the model itself;
* ORT: the model exported by hand with ``torch.onnx.export(..., dynamo=True)`` and a
  dynamic batch axis, run by an ONNX Runtime CPU session with the same settings the
  backend uses (all graph optimizations, ``intra_op_num_threads`` = the thread count),
  called the usual way, ``session.run`` on numpy views of the tensors;
* aitune: the model wrapped in ``aitune_core.Module`` and tuned by MaxThroughputStrategy
  over ONNXRuntimeBackend and eager, on batches up to the measured batch; calls go
  through aitune's routing and the backend's IOBinding, as a user's calls would.

Reported: median milliseconds per call, throughput, speedup over eager, and aitune's
throughput as a fraction of the hand-written ORT deployment (target >= 0.95).

``python -m bench.onnx [--threads N] [--quick]`` runs it alone; ``python -m bench onnx``
runs it as a registered suite.
"""

from __future__ import annotations

import copy
import itertools
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench import backend_report
from bench.backend_report import AITUNE_TARGET
from bench.timing import Options, Result, Stats, median

BATCH_SIZES = {"cnn": 32, "mlp": 64, "transformer": 16}
_names = itertools.count()


def _plugin_on_path() -> None:
    """Let the bench run from a source checkout where the plugin is not installed."""
    try:
        import aitune_onnx  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "aitune_onnx"))


def _raw_ort(model: torch.nn.Module, batch: torch.Tensor, folder: Path, threads: int) -> Callable[[torch.Tensor], Any]:
    """The model exported and loaded by hand, as a user without aitune would."""
    import onnxruntime
    from torch.export import Dim

    path = folder / f"raw-{next(_names)}.onnx"
    dims = ({0: Dim("batch", min=1, max=batch.shape[0])},)
    with torch.no_grad():
        program = torch.onnx.export(
            model, (batch,), dynamo=True, input_names=["x"], output_names=["y"], dynamic_shapes=dims, verbose=False
        )
    assert program is not None
    program.save(str(path))
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run(["y"], {"x": x.numpy()})[0])

    return run


def _aitune(model: torch.nn.Module, name: str, samples: list[torch.Tensor], batch: int) -> tuple[Any, Any]:
    from aitune_onnx import ONNXRuntimeBackend

    import aitune_core as ait

    wrapped = ait.Module(model, f"bench-onnx-{name}-{next(_names)}")
    strategy = ait.MaxThroughputStrategy(
        backends=[ONNXRuntimeBackend(), ait.TorchEagerBackend()],
        profile=ait.ProfileConfig(max_batch_search=False),
    )
    report = ait.tune(wrapped, samples, batch_sizes=[batch // 4, batch // 2, batch], strategy=strategy)
    return wrapped, report


def _bench_model(name: str, rounds: int, folder: Path, threads: int) -> dict[str, Any]:
    from aitune_core.demo.models import build_demo

    model, samples = build_demo(name)
    batch_size = BATCH_SIZES[name]
    batch = torch.stack([samples[i % len(samples)] for i in range(batch_size)])
    with torch.no_grad():
        expected = model(batch)
    variants: dict[str, Callable[[torch.Tensor], Any]] = {"eager": model}
    variants["ORT"] = _raw_ort(copy.deepcopy(model), batch, folder, threads)
    wrapped, report = _aitune(copy.deepcopy(model), name, samples, batch_size)
    variants["aitune"] = wrapped
    with torch.no_grad():
        for variant, fn in variants.items():
            if not torch.allclose(fn(batch), expected, rtol=1e-3, atol=1e-3):
                raise AssertionError(f"{name}: {variant} does not match eager")
    times = backend_report.measure_variants(variants, batch, rounds)
    medians = {variant: median(values) for variant, values in times.items()}
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
        "best_raw": "ORT",
        "aitune_vs_best_raw": medians["ORT"] / medians["aitune"],
        "_times": times,
    }


def measure_all(threads: int = 1, rounds: int = 15) -> dict[str, Any]:
    """Every model and variant; times kept raw (seconds) under ``_times`` for the suite runner."""
    _plugin_on_path()
    torch.set_num_threads(threads)
    results: dict[str, Any] = {"threads": threads, "target": AITUNE_TARGET, "models": {}}
    with tempfile.TemporaryDirectory(prefix="bench-onnx-") as folder:
        import aitune_core as ait

        previous_cache = ait.config.cache_dir
        ait.config.cache_dir = Path(folder) / "aitune-cache"
        try:
            for name in BATCH_SIZES:
                results["models"][name] = _bench_model(name, rounds, Path(folder), threads)
        finally:
            ait.config.cache_dir = previous_cache
    return results


def run(threads: int | Options = 1) -> dict[str, Any] | list[Result]:
    """Measure; see :func:`bench.backend_report.run` for the two forms."""
    return backend_report.run(measure_all, threads)


def main(argv: list[str] | None = None) -> int:
    return backend_report.main(
        measure_all, "python -m bench.onnx", __doc__.split("\n\n")[0], "torch and ONNX Runtime intra-op threads", argv
    )


if __name__ == "__main__":
    sys.exit(main())
