"""accuracy: the budgeted tune against the lossless tune, on the example's models (timm ViT, BERT).

Runs ``examples/quantize_within_budget`` (``compare``): each model is tuned twice, once
lossless and once with an accuracy budget (torchao int8 per wrapped module, kept while
the whole model's metric on held-out data stays within it), then both are timed in
alternating rounds at each batch size. Reported per model and batch size: median
milliseconds per call of each, with the budgeted tune's speedup over the lossless one
and the held-out drop it cost in the note. Whether a module goes lossy is decided on
timings, so run it quiet and again beside bursty CPU neighbours (``AITUNE_BENCH_LOAD=1``,
:mod:`bench.neighbours`), which then run through both tunes.

Needs timm and transformers (the models virtualenv) and the aitune-torchao plugin.
``python -m bench accuracy`` runs it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
from pathlib import Path
from types import ModuleType

from bench.neighbours import bursty_neighbours, load_wanted
from bench.timing import Options, Result, Stats

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quantize_within_budget" / "quantize_within_budget.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quantize_within_budget", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(options: Options) -> list[Result]:
    example = _example()
    loaded = load_wanted()
    results = []
    for name in example.MODELS:
        with bursty_neighbours() if loaded else contextlib.nullcontext():
            outcome = example.compare(name, rounds=options.rounds(30, 8))
        accuracy = outcome["report"]
        print(accuracy.render(), flush=True)
        for size, times in outcome["timings"].items():
            speedup = statistics.median(times["lossless"]) / statistics.median(times["budgeted"])
            note = (
                f"{speedup:.2f}x over lossless; drop {accuracy.final_drop:.4g} of {accuracy.metric} "
                f"(budget {accuracy.max_drop:g}); lossy: {len(accuracy.chosen)} of {len(accuracy.sensitivities)}"
                f"{'; with neighbours' if loaded else ''}"
            )
            extra = {
                "speedup": speedup,
                "drop": accuracy.final_drop,
                "max_drop": accuracy.max_drop,
                "chosen": accuracy.chosen,
                "neighbours": loaded,
            }
            for variant in ("lossless", "budgeted"):
                results.append(
                    Result(
                        f"{name} batch {size}",
                        variant,
                        Stats.of(times[variant]),
                        unit="ms",
                        note=note if variant == "budgeted" else "",
                        extra=extra if variant == "budgeted" else {},
                    )
                )
    return results
