"""Decode: time per decode step of a tuned GPT-2 greedy-decoding loop against eager.

For each GPT-2 configuration below (random weights from ``GPT2Config``, nothing
downloaded), the model is wrapped in ``aitune_core.Module`` and tuned by
``MaxThroughputStrategy`` over Inductor JIT and eager, on a greedy loop of
``NEW_TOKENS`` tokens from prompts of ``PROMPT_LENGTH`` tokens at the measured batch
sizes: the prefill call and the decode calls (one token, the KV cache passed along)
are two graphs, each tuned and routed on its own. Then, in alternating rounds, eager
(the model itself) and aitune (the wrapped model, routing included) each run one
prefill, untimed, and ``NEW_TOKENS - 1`` decode steps, timed; a round's value is the
time per step. Reported: the median per step with p10 .. p90, the ratio of the medians
(eager / aitune), and the backend serving each phase. Both generate the same tokens
(checked before timing). A third variant, "decode backend alone", runs the same prefill
through aitune and calls the decode graph's backend directly: the difference to
"aitune" is what routing a decode call costs (graph key with the cache's structure and
phase, shape check).

Needs transformers and the plugins aitune-transformers and aitune-inductor; skipped,
saying so, without them. ``python -m bench decode`` runs it.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import torch

from bench.timing import Options, Result, Stats, alternate, median

PROMPT_LENGTH = 8
NEW_TOKENS = 32
BATCH_SIZES = (1, 4)
RAW = "decode backend alone"
MODELS = {
    "GPT-2 2 layers, hidden 64": {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1000, "n_positions": 128},
    "GPT-2 4 layers, hidden 256": {"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 8000, "n_positions": 128},
}


def _generate(model: Any, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        tokens = [prompt]
        for _ in range(new_tokens - 1):
            tokens.append(out.logits[:, -1:].argmax(-1))
            out = model(input_ids=tokens[-1], cache=out.cache, use_cache=True)
        tokens.append(out.logits[:, -1:].argmax(-1))
    return torch.cat(tokens, dim=1)


def _decode_step_s(model: Any, prompt: torch.Tensor, decode: Any = None) -> float:
    """Seconds per decode step over NEW_TOKENS - 1 steps after an untimed prefill by ``model``;
    the steps call ``decode`` (default: ``model``)."""
    steps = NEW_TOKENS - 1
    decode = model if decode is None else decode
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        start = time.perf_counter()
        for _ in range(steps):
            out = decode(input_ids=out.logits[:, -1:].argmax(-1), cache=out.cache, use_cache=True)
        return (time.perf_counter() - start) / steps


def _phase(key: Hashable) -> str:
    if key in ("prefill", "decode"):
        return str(key)
    if isinstance(key, tuple):
        return next((found for part in key if (found := _phase(part)) != "?"), "?")
    return "?"


def _serving(wrapped: Any, report: Any) -> dict[str, dict[str, str]]:
    """For each phase: the backend at each measured batch size, with its speedup in the tune's comparison."""
    names = {route.graph.name: _phase(key) for key, route in wrapped.routes.items()}
    found: dict[str, dict[str, str]] = {}
    for graph in report.graphs:
        sizes = {}
        for size in BATCH_SIZES:
            candidate = graph.serving_at(size)
            if candidate is None:
                sizes[str(size)] = "eager"
            else:
                speedup = candidate.speedups.get(size)
                sizes[str(size)] = candidate.backend + (f" {speedup.describe()}" if speedup else "")
        found[names.get(graph.graph, graph.graph)] = sizes
    return found


def _bench_model(label: str, settings: dict[str, Any], options: Options) -> list[Result]:
    from aitune_inductor import TorchInductorJitBackend
    from transformers import GPT2Config, GPT2LMHeadModel

    import aitune_core as ait

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**settings)).eval()
    generator = torch.Generator().manual_seed(1)
    dataset = [torch.randint(0, settings["vocab_size"], (PROMPT_LENGTH,), generator=generator) for _ in range(8)]
    wrapped = ait.Module(copy.deepcopy(model), f"bench-decode-{settings['n_layer']}x{settings['n_embd']}")
    strategy = ait.MaxThroughputStrategy(
        backends=[TorchInductorJitBackend(), ait.TorchEagerBackend()],
        profile=ait.ProfileConfig(max_batch_search=False),
    )
    started = time.perf_counter()
    report = ait.tune(
        lambda batch: _generate(wrapped, batch, NEW_TOKENS), dataset, batch_sizes=list(BATCH_SIZES), strategy=strategy
    )
    tune_s = time.perf_counter() - started
    serving = _serving(wrapped, report)
    print(f"  {label}: tune() {tune_s:.1f} s; serving {serving}", flush=True)

    decode_routes = [r for key, r in wrapped.routes.items() if _phase(key) == "decode"]
    raw_decode = None
    if len(decode_routes) == 1 and not decode_routes[0].lower:  # one backend serves every decode call
        call = decode_routes[0].call
        # Called as the wrapper calls it (bound: input_ids and cache positional), so that Dynamo's
        # guards match the compiled graph and nothing compiles again.
        raw_decode = lambda input_ids, cache, use_cache: call(input_ids, cache, use_cache=use_cache)  # noqa: E731
    results = []
    previous_fallback = ait.config.fallback
    ait.config.fallback = "raise"  # every timed call must be routed, none run eagerly behind aitune's back
    try:
        for size in BATCH_SIZES:
            prompt = torch.stack(dataset[:size])
            if not torch.equal(_generate(model, prompt, NEW_TOKENS), _generate(wrapped, prompt, NEW_TOKENS)):
                raise AssertionError(f"{label}, batch {size}: aitune's tokens differ from eager's")
            variants = {
                "eager": lambda p=prompt: _decode_step_s(model, p),
                "aitune": lambda p=prompt: _decode_step_s(wrapped, p),
            }
            if raw_decode is not None:
                # The decode graph's backend called directly: what routing (graph key, phase, shape check) costs.
                variants[RAW] = lambda p=prompt: _decode_step_s(wrapped, p, raw_decode)
            times = alternate(variants, rounds=options.rounds(15, 3))
            ratio = median(times["eager"]) / median(times["aitune"])
            decode = serving.get("decode", {}).get(str(size), "?")
            name = f"decode step, {label}, batch {size}"
            extra = {"batch_size": size, "serving": serving, "tune_s": tune_s, "eager_over_aitune": ratio}
            results.append(Result(name, "eager", Stats.of(times["eager"]), unit="ms", extra=extra))
            if RAW in times:
                raw_ratio = median(times["eager"]) / median(times[RAW])
                results.append(Result(name, RAW, Stats.of(times[RAW]), unit="ms", note=f"{raw_ratio:.2f}x"))
            results.append(
                Result(
                    name,
                    "aitune",
                    Stats.of(times["aitune"]),
                    unit="ms",
                    note=f"{ratio:.2f}x; decode: {decode}",
                    extra=extra,
                )
            )
    finally:
        ait.config.fallback = previous_fallback
    results.append(Result(f"tune(), {label}, batch sizes {list(BATCH_SIZES)}", "aitune", Stats.of([tune_s]), unit="s"))
    return results


def run(options: Options) -> list[Result]:
    missing = [name for name in ("transformers", "aitune_transformers", "aitune_inductor") if not _importable(name)]
    if missing:
        print(f"decode: skipped, {', '.join(missing)} not installed", flush=True)
        return []
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(options.threads)
    import aitune_core as ait

    previous_cache = ait.config.cache_dir
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="bench-decode-") as folder:
        ait.config.cache_dir = Path(folder) / "aitune-cache"
        try:
            models = list(MODELS.items())[:1] if options.quick else list(MODELS.items())
            for label, settings in models:
                results += _bench_model(label, settings, options)
        finally:
            ait.config.cache_dir = previous_cache
    return results


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
