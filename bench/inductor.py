"""Inductor: eager, raw ``torch.compile``, raw AOT Inductor and aitune with the inductor plugin.

For each bundled demo model (DemoCNN, DemoMLP) at one batch size, four variants run
in one process, measured in alternating rounds (``bench.timing.alternate``):

* eager: the model itself;
* torch.compile: ``torch.compile(model)`` with its defaults, warmed up at the batch;
* AOTI: ``torch.export`` at the batch (static shapes), ``aoti_compile_and_package``,
  ``aoti_load_package``: the fastest a hand-written AOT Inductor deployment gets;
* aitune: the model wrapped in ``aitune_core.Module`` and tuned by MaxThroughputStrategy
  over TorchInductorJitBackend, TorchInductorAotBackend and eager, on batches up to the
  measured batch; calls go through aitune's routing, as a user's calls would.

Reported: median milliseconds per call, throughput, speedup over eager, and aitune's
throughput as a fraction of the best raw option (target >= 0.95).

``python -m bench.inductor [--threads N] [--quick]`` runs it alone; ``python -m bench
inductor`` runs it as a registered suite.
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
RAW = ("torch.compile", "AOTI")
_names = itertools.count()


def _plugin_on_path() -> None:
    """Let the bench run from a source checkout where the plugin is not installed."""
    try:
        import aitune_inductor  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "aitune_inductor"))


def _raw_compile(model: torch.nn.Module, batch: torch.Tensor) -> Callable[[torch.Tensor], Any]:
    compiled = torch.compile(model)
    with torch.no_grad():
        for _ in range(3):
            compiled(batch)
    return compiled


def _raw_aoti(model: torch.nn.Module, batch: torch.Tensor, folder: Path) -> Callable[[torch.Tensor], Any]:
    import torch._inductor

    with torch.no_grad():
        program = torch.export.export(model, (batch,))
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(folder / "raw.pt2"))
    return torch._inductor.aoti_load_package(path)


def _aitune(model: torch.nn.Module, name: str, samples: list[torch.Tensor], batch: int) -> tuple[Any, Any]:
    from aitune_inductor import TorchInductorAotBackend, TorchInductorJitBackend

    import aitune_core as ait

    wrapped = ait.Module(model, f"bench-inductor-{name}-{next(_names)}")
    strategy = ait.MaxThroughputStrategy(
        backends=[TorchInductorJitBackend(), TorchInductorAotBackend(), ait.TorchEagerBackend()],
        profile=ait.ProfileConfig(max_batch_search=False),
    )
    report = ait.tune(wrapped, samples, batch_sizes=[batch // 4, batch // 2, batch], strategy=strategy)
    return wrapped, report


def _bench_model(name: str, rounds: int, folder: Path) -> dict[str, Any]:
    from aitune_core.demo.models import build_demo

    model, samples = build_demo(name)
    batch_size = BATCH_SIZES[name]
    batch = torch.stack([samples[i % len(samples)] for i in range(batch_size)])
    with torch.no_grad():
        expected = model(batch)
    variants: dict[str, Callable[[torch.Tensor], Any]] = {"eager": model}
    variants["torch.compile"] = _raw_compile(copy.deepcopy(model), batch)
    variants["AOTI"] = _raw_aoti(copy.deepcopy(model), batch, folder)
    wrapped, report = _aitune(copy.deepcopy(model), name, samples, batch_size)
    variants["aitune"] = wrapped
    with torch.no_grad():
        for variant, fn in variants.items():
            if not torch.allclose(fn(batch), expected, rtol=1e-3, atol=1e-3):
                raise AssertionError(f"{name}: {variant} does not match eager")
    times = backend_report.measure_variants(variants, batch, rounds)
    medians = {variant: median(values) for variant, values in times.items()}
    best_raw = min(RAW, key=lambda variant: medians[variant])
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


def measure_all(threads: int = 1, rounds: int = 15) -> dict[str, Any]:
    """Every model and variant; times kept raw (seconds) under ``_times`` for the suite runner."""
    _plugin_on_path()
    torch.set_num_threads(threads)
    results: dict[str, Any] = {"threads": threads, "target": AITUNE_TARGET, "models": {}}
    with tempfile.TemporaryDirectory(prefix="bench-inductor-") as folder:
        import aitune_core as ait

        previous_cache = ait.config.cache_dir
        ait.config.cache_dir = Path(folder) / "aitune-cache"
        try:
            for name in BATCH_SIZES:
                results["models"][name] = _bench_model(name, rounds, Path(folder))
        finally:
            ait.config.cache_dir = previous_cache
    return results


def run(threads: int | Options = 1) -> dict[str, Any] | list[Result]:
    """Measure; see :func:`bench.backend_report.run` for the two forms."""
    return backend_report.run(measure_all, threads)


def main(argv: list[str] | None = None) -> int:
    return backend_report.main(
        measure_all,
        "python -m bench.inductor",
        __doc__.split("\n\n")[0],
        "torch.set_num_threads for every variant",
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
