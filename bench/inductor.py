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

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench import backend_report
from bench.timing import Options, Result

BATCH_SIZES = {"cnn": 32, "mlp": 64, "transformer": 16}


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


def measure_all(threads: int = 1, rounds: int = 15) -> dict[str, Any]:
    """Every model and variant; times kept raw (seconds) under ``_times`` for the suite runner."""

    def models(folder: Path) -> dict[str, Any]:
        from aitune_inductor import TorchInductorAotBackend, TorchInductorJitBackend

        raw = {"torch.compile": _raw_compile, "AOTI": lambda model, batch: _raw_aoti(model, batch, folder)}
        backends = [TorchInductorJitBackend(), TorchInductorAotBackend()]
        return {
            name: backend_report.bench_model("inductor", name, size, raw, backends, rounds)
            for name, size in BATCH_SIZES.items()
        }

    return backend_report.measure_all("inductor", threads, models)


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
