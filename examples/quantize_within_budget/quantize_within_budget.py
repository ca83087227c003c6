"""Quantize within an accuracy budget: int8 where the metric allows it, exact where it does not.

    python examples/quantize_within_budget/quantize_within_budget.py [vit|bert ...] [--candidates torchao|defaults]

For each model, two copies are tuned on the same random data:

* lossless: ``ait.tune`` as always (no lossy candidate serves);
* budgeted: ``ait.tune(..., accuracy=ait.AccuracyBudget(metric, max_drop))``: lossless
  winners first, then torchao int8 per wrapped module, kept only while the whole
  model's metric on held-out data stays within the budget.

``vit``: a timm ViT-Small classifier (random weights, 4 blocks at 96x96), each block's
MLP and the head wrapped, budget ``ait.metrics.top1_agreement`` >= 0.99 against eager.
``bert``: a transformers BERT sequence classifier (random weights, BERT-base widths, 4
layers), each layer's feed-forward wrapped, budget ``ait.metrics.cosine`` >= 0.999 on
the logits. Int8 pays where matrices are wide: at the widths of ViT-Tiny it loses to
fp32 on a CPU, and the budgeted tune then keeps the lossless routes (it says so).

It prints the sensitivity table and the Pareto front (the tuning summary), then the
budgeted model's speedup over the lossless one at each batch size, timed here in
alternating rounds. ``--candidates torchao`` (the default, quick on a CPU) offers eager
and torchao's int8 presets; ``defaults`` offers every installed plugin's candidates.
Needs ``timm`` (vit), ``transformers`` (bert) and the ``aitune-torchao`` plugin.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights from a config: nothing to download
os.environ.setdefault("AITUNE_LOG_LEVEL", "warning")  # the summary says what matters

import torch
from torch import nn

import aitune_core as ait

BATCH_SIZES = [1, 8]
SAMPLES = 40  # every fifth is held out for the budget
TIMING_ROUNDS = 30


def strategy(candidates: str, lossy: bool) -> ait.TuneStrategy | None:
    """The candidates offered: eager and torchao int8 (``torchao``), or the plugins' defaults."""
    if candidates == "defaults":
        return None
    from aitune_torchao import TorchAOBackend

    backends: list[Any] = [ait.TorchEagerBackend()]
    if lossy:
        # Uncompiled, torchao's int8 tensors dispatch per op and lose to fp32 on a CPU; under
        # torch.compile, dynamic int8 runs oneDNN's int8 GEMMs (VNNI/AMX where the CPU has them).
        backends += [TorchAOBackend(preset="int8wo"), TorchAOBackend(preset="int8dq", compile=True)]
    return ait.MaxThroughputStrategy(backends=backends)


# ---------------------------------------------------------------------- the models


def vit(prefix: str) -> tuple[nn.Module, Callable[..., Any], list[Any]]:
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=96, depth=4, num_classes=100).eval()
    ait.wrap(model, ["blocks.*.mlp", "head"], prefix=prefix)
    generator = torch.Generator().manual_seed(1)
    data = [torch.randn(3, 96, 96, generator=generator) for _ in range(SAMPLES)]
    return model, model, data


def bert(prefix: str) -> tuple[nn.Module, Callable[..., Any], list[Any]]:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=1000,
        hidden_size=768,
        num_hidden_layers=4,
        num_attention_heads=12,
        intermediate_size=3072,
        num_labels=4,
    )
    model = BertForSequenceClassification(config).eval()
    ait.wrap(model, ["bert.encoder.layer.*.intermediate", "bert.encoder.layer.*.output"], prefix=prefix)

    def classify(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return model(input_ids=input_ids, attention_mask=attention_mask).logits

    generator = torch.Generator().manual_seed(1)
    data = [
        {
            "input_ids": torch.randint(1, 1000, (32,), generator=generator),
            "attention_mask": torch.ones(32, dtype=torch.long),
        }
        for _ in range(SAMPLES)
    ]
    return model, classify, data


MODELS = {
    "vit": (vit, ait.metrics.top1_agreement, 0.01),
    "bert": (bert, ait.metrics.cosine, 0.001),
}


# ---------------------------------------------------------------------- tuning and timing


def compare(name: str, candidates: str = "torchao", rounds: int = TIMING_ROUNDS) -> dict[str, Any]:
    """Tune a lossless and a budgeted copy of model ``name``; their speeds at each batch size and the drop."""
    build, metric, max_drop = MODELS[name]
    _, lossless, data = build(f"{name}-lossless.")
    ait.tune(lossless, data, batch_sizes=BATCH_SIZES, strategy=strategy(candidates, lossy=False))
    _, budgeted, _ = build(f"{name}-budgeted.")
    budget = ait.AccuracyBudget(metric, max_drop)
    report = ait.tune(
        budgeted, data, batch_sizes=BATCH_SIZES, strategy=strategy(candidates, lossy=True), accuracy=budget
    )
    assert report.accuracy is not None
    timings = {}
    for size in BATCH_SIZES:
        batch = _batch(data, size)
        timings[size] = _alternate(
            {"lossless": lambda b=batch: lossless(**b), "budgeted": lambda b=batch: budgeted(**b)}, rounds
        )
    return {"report": report.accuracy, "timings": timings}


def _batch(data: list[Any], size: int) -> dict[str, Any]:
    items = data[:size]
    if isinstance(items[0], dict):
        return {key: torch.stack([item[key] for item in items]) for key in items[0]}
    return {"x": torch.stack(items)}


def _alternate(variants: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each variant, one per round, in alternating rounds so both see the same machine."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    with torch.no_grad():
        for round_index in range(rounds + 2):
            for name, call in variants.items():
                start = time.perf_counter()
                call()
                if round_index >= 2:  # warm-up
                    times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help=f"which of {', '.join(MODELS)} (default: both)")
    parser.add_argument("--candidates", choices=["torchao", "defaults"], default="torchao")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pareto", help="also draw the Pareto chart to this .png (needs matplotlib)")
    args = parser.parse_args()
    unknown = [name for name in args.models if name not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    torch.set_num_threads(args.threads)
    for name in args.models or list(MODELS):
        result = compare(name, args.candidates)
        accuracy = result["report"]
        print(f"\n=== {name}: {accuracy.metric}, max drop {accuracy.max_drop:g}")
        print(accuracy.render())
        print(f"Speedup of the budgeted tune over the lossless tune ({args.candidates} candidates):")
        for size, times in result["timings"].items():
            lossless_ms = statistics.median(times["lossless"]) * 1e3
            budgeted_ms = statistics.median(times["budgeted"]) * 1e3
            print(
                f"  batch {size}: lossless {lossless_ms:.2f} ms, budgeted {budgeted_ms:.2f} ms, "
                f"{lossless_ms / budgeted_ms:.2f}x"
            )
        if args.pareto:
            print(f"Pareto chart: {accuracy.plot_pareto(args.pareto.replace('.png', f'-{name}.png'))}")


if __name__ == "__main__":
    main()
