"""``aitune demo``: tune a bundled model with every available backend and show the gain.

It uses MaxThroughputStrategy over the default candidates of all installed plugins,
on CUDA when there is a GPU and on the CPU otherwise, then times the tuned model
against the original at every tuned batch size, the way tuning compares candidates
(interleaved rounds, medians and a confidence interval), and says where that
end-to-end speedup disagrees with the summary table, and why.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aitune_core.checkpoint.load import read
from aitune_core.checkpoint.save import save
from aitune_core.demo.models import build_demo
from aitune_core.evaluate.result import CandidateResult, describe_range
from aitune_core.module.wrapper import Module
from aitune_core.names import default_device
from aitune_core.profiling.compare import BatchComparison, Variant, compare
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.profiling.timer import EAGER, WallClock
from aitune_core.reporting.summary import TuneReport
from aitune_core.strategies.max_throughput import MaxThroughputStrategy
from aitune_core.tuning import tune
from aitune_core.validation.inputs import CallInputs

TUNED = "tuned"


def end_to_end(
    original: torch.nn.Module, tuned: torch.nn.Module, call: CallInputs, batch_size: int, profile: ProfileConfig
) -> BatchComparison:
    """The tuned model against the original, timed as tuning compares candidates: interleaved rounds."""
    variants = [Variant(EAGER, original), Variant(TUNED, tuned)]
    return compare(variants, call, batch_size, profile, WallClock(), gate=1.0)


def agreement(report: TuneReport, module: str, measured: BatchComparison) -> str:
    """How the end-to-end speedup at one batch size compares with the table's, and why they may differ.

    The table times each backend's own callable; an end-to-end call also goes through
    the wrapper (graph key, shape checks, picking the batch range), so a fast backend
    on a tiny model can lose a visible share of its gain there.
    """
    size = measured.batch_size
    end = measured.speedup(TUNED)
    serving = _serving_at(report, module, size)
    if serving is None:
        return f"batch {size}: {end.describe()} end to end; eager serves it, so about 1x is expected"
    table = serving.speedups.get(size)
    if table is None:
        return f"batch {size}: {end.describe()} end to end ({serving.backend})"
    text = f"batch {size}: {end.describe()} end to end, {table.describe()} in the table ({serving.backend})"
    if end.low > table.high:
        text += " -- faster end to end than in the table: the machine's load changed between the two measurements"
    elif end.high < table.low:
        backend_ms = next((m.median_ms for m in serving.sweep if m.batch_size == size), None)
        tuned_ms = measured.measurement(TUNED).median_ms
        extra = f" (about {(tuned_ms - backend_ms) * 1e3:.0f} us per call here)" if backend_ms else ""
        text += (
            " -- slower end to end than in the table: the table times the backend alone, this the whole call "
            f"through the wrapper{extra}, and the machine's load may have changed"
        )
    return text


def _serving_at(report: TuneReport, module: str, size: int) -> CandidateResult | None:
    graph = next((graph for graph in report.graphs if graph.module == module), None)
    return graph.serving_at(size) if graph is not None else None


def _load_hint(path: str, model_name: str) -> str:
    """How to load the saved demo, with ``trust_native_code=True`` only when the checkpoint needs it."""
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
        profile = ProfileConfig(min_time_s=0.2, max_time_s=1.0)
        checks = []
        for size in sorted(set(batch_sizes)):
            batch = torch.stack([samples[i % len(samples)] for i in range(size)]).to(target)
            with torch.no_grad():
                torch.testing.assert_close(wrapped(batch), reference(batch), rtol=1e-3, atol=1e-4)
            checks.append(
                end_to_end(reference, wrapped, CallInputs(f"batch {size}", (batch,), {}, size), size, profile)
            )
        if save_to:
            save(wrapped, save_to)
            print(f"Saved the tuned model to {save_to}; `aitune inspect {save_to}` shows it.")
            print(_load_hint(save_to, model_name))
    finally:
        del wrapped
    name = f"demo-{model_name}"
    print(f"\nDemo model `{model_name}` on {target}, timed end to end against the original (interleaved rounds):")
    for check in checks:
        print("  " + agreement(report, name, check))
    largest = checks[-1]
    speedup = largest.speedup(TUNED).median
    print(
        f"At batch {largest.batch_size}: eager {largest.measurement(EAGER).median_ms:.3f} ms, tuned "
        f"{largest.measurement(TUNED).median_ms:.3f} ms per call -> {speedup:.2f}x (serving: {_routes(report, name)})"
    )
    return report, speedup


def _routes(report: TuneReport, module: str) -> str:
    parts = []
    for graph in report.graphs:
        if graph.module != module:
            continue
        for row in graph.serving:
            parts.append(f"{row.backend} for {row.describe_serves() or 'every call'}")
        if graph.eager_serves:
            parts.append("eager for " + ", ".join(describe_range(lo, hi) for lo, hi in graph.eager_serves))
    return "; ".join(parts) or "eager"
