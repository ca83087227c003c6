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

import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench import backend_report
from bench.timing import Options, Result

BATCH_SIZES = {"cnn": 32, "mlp": 64, "transformer": 16}
_names = itertools.count()


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


def measure_all(threads: int = 1, rounds: int = 15) -> dict[str, Any]:
    """Every model and variant; times kept raw (seconds) under ``_times`` for the suite runner."""

    def models(folder: Path) -> dict[str, Any]:
        from aitune_onnx import ONNXRuntimeBackend

        raw = {"ORT": lambda model, batch: _raw_ort(model, batch, folder, threads)}
        return {
            name: backend_report.bench_model("onnx", name, size, raw, [ONNXRuntimeBackend()], rounds)
            for name, size in BATCH_SIZES.items()
        }

    return backend_report.measure_all("onnx", threads, models)


def run(threads: int | Options = 1) -> dict[str, Any] | list[Result]:
    """Measure; see :func:`bench.backend_report.run` for the two forms."""
    return backend_report.run(measure_all, threads)


def main(argv: list[str] | None = None) -> int:
    return backend_report.main(
        measure_all, "python -m bench.onnx", __doc__.split("\n\n")[0], "torch and ONNX Runtime intra-op threads", argv
    )


if __name__ == "__main__":
    sys.exit(main())
