"""``aitune demo``: tune a bundled model with every available backend and show the gain.

It uses MaxThroughputStrategy over the default candidates of all installed plugins,
on CUDA when there is a GPU and on the CPU otherwise, then times the tuned model
against the original at the largest tuned batch size, alternating the two.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from aitune_core.demo.models import build_demo
from aitune_core.module.wrapper import Module
from aitune_core.reporting.summary import TuneReport
from aitune_core.strategies.max_throughput import MaxThroughputStrategy
from aitune_core.tuning import default_device, tune


def _time_once(fn: torch.nn.Module, batch: torch.Tensor, repeats: int) -> float:
    sync = torch.cuda.synchronize if batch.is_cuda else (lambda: None)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(repeats):
            fn(batch)
    sync()
    return (time.perf_counter() - start) / repeats


def compare_with_eager(
    original: torch.nn.Module, tuned: torch.nn.Module, batch: torch.Tensor, rounds: int = 7
) -> tuple[float, float]:
    """Median seconds per call of the original and the tuned model, measured alternately."""
    with torch.no_grad():
        for _ in range(3):
            original(batch)
            tuned(batch)
    eager, optimized = [], []
    for _ in range(rounds):
        eager.append(_time_once(original, batch, 5))
        optimized.append(_time_once(tuned, batch, 5))
    return statistics.median(eager), statistics.median(optimized)


def _load_hint(path: str, model_name: str) -> str:
    """How to load the saved demo, with ``trust_native_code=True`` only when the checkpoint needs it."""
    from aitune_core.checkpoint.load import read

    _, manifest = read(path)
    native = any(ref.native for ref in manifest.artifacts())
    flag = ", trust_native_code=True" if native else ""
    why = (
        "\n  (it holds native code, an AOT package whose library runs when loaded: trust only checkpoints you made)"
        if native
        else ""
    )
    return (
        f"Load it elsewhere with: aitune_core.load(aitune_core.demo.models.build_demo({model_name!r})[0], "
        f"{path!r}{flag}){why}"
    )


def run_demo(
    model_name: str = "cnn",
    batch_sizes: Sequence[int] = (1, 2, 4, 8),
    device: str | None = None,
    save_to: str | None = None,
) -> tuple[TuneReport, float]:
    """Tune the named demo model; return the report and the measured speedup over eager."""
    target = torch.device(device) if device else default_device()
    model, samples = build_demo(model_name)
    model = model.to(target)
    reference = build_demo(model_name)[0].to(target)
    wrapped = Module(model, f"demo-{model_name}")
    try:
        report = tune(wrapped, samples, batch_sizes=list(batch_sizes), device=target, strategy=MaxThroughputStrategy())
        batch = torch.stack([samples[i % len(samples)] for i in range(max(batch_sizes))]).to(target)
        with torch.no_grad():
            torch.testing.assert_close(wrapped(batch), reference(batch), rtol=1e-3, atol=1e-4)
        eager_s, tuned_s = compare_with_eager(reference, wrapped, batch)
        if save_to:
            from aitune_core.checkpoint import save

            save(wrapped, save_to)
            print(f"Saved the tuned model to {save_to}; `aitune inspect {save_to}` shows it.")
            print(_load_hint(save_to, model_name))
    finally:
        del wrapped
    speedup = eager_s / tuned_s
    print(
        f"\nDemo model `{model_name}` on {target}, batch {max(batch_sizes)}: eager {eager_s * 1e3:.3f} ms, "
        f"tuned {tuned_s * 1e3:.3f} ms per call -> {speedup:.2f}x "
        f"(selected: {report.selected(f'demo-{model_name}')})"
    )
    return report, speedup
