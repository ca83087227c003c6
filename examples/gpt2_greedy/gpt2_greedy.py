"""Greedy decoding with a tiny GPT-2: tune prefill and decode, save, load in a fresh process.

    python examples/gpt2_greedy/gpt2_greedy.py [--out DIR] [--new-tokens 32] [--threads 1]

1. Builds a 2-layer GPT-2 with random weights (``GPT2Config``, no download), wraps it
   in ``aitune_core.Module`` and tunes it on a greedy-decoding loop over a few prompts at
   batch sizes 1 and 2. The prompt call (prefill) and the one-token calls that pass the
   KV cache along (decode) become two graphs, each tuned on its own.
2. Saves the checkpoint (``ait.save``), the model's config and its ``state_dict`` into
   ``--out`` (a temporary folder by default).
3. Runs this file again in a fresh process (``deploy DIR``): it builds the model from the
   saved config and weights, loads the checkpoint (``ait.load``), generates
   ``--new-tokens`` tokens for new prompts with the tuned model and with eager, checks
   they are identical, and times one decode step of each.

Needs ``transformers`` and the plugins ``aitune-transformers`` and ``aitune-inductor``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights from a config: nothing to download
os.environ.setdefault("AITUNE_LOG_LEVEL", "warning")  # the summary below says what matters

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import aitune_core as ait

CONFIG = {"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 1000, "n_positions": 128}
PROMPT_LENGTH = 8
NUM_PROMPTS = 4
TIMING_ROUNDS = 15

CHECKPOINT = "checkpoint"  # what ait.save writes: tuned graphs, routes, backend configs
CONFIG_FILE = "config.json"  # GPT2Config, to build the same architecture elsewhere
WEIGHTS_FILE = "weights.pt"  # the model's state_dict, for the eager reference
TOKENS_FILE = "tokens.pt"  # prompts and the tokens eager generated from them, in the tuning process


# ---------------------------------------------------------------------- the model and the loop


def build_model(config: GPT2Config) -> GPT2LMHeadModel:
    return GPT2LMHeadModel(config).eval()


def generate(model: Any, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding: one prefill call on the prompt, then one decode call per new token."""
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        tokens = [prompt]
        for _ in range(new_tokens - 1):
            tokens.append(out.logits[:, -1:].argmax(-1))
            out = model(input_ids=tokens[-1], cache=out.cache, use_cache=True)
        tokens.append(out.logits[:, -1:].argmax(-1))
    return torch.cat(tokens, dim=1)


def decode_step_s(model: Any, prompt: torch.Tensor, steps: int) -> float:
    """Seconds per decode call over ``steps`` calls after an untimed prefill."""
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        start = time.perf_counter()
        for _ in range(steps):
            out = model(input_ids=out.logits[:, -1:].argmax(-1), cache=out.cache, use_cache=True)
        return (time.perf_counter() - start) / steps


def prompts(count: int, seed: int, vocab_size: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (PROMPT_LENGTH,), generator=generator) for _ in range(count)]


# ---------------------------------------------------------------------- what serves what


def phase_of(key: Hashable) -> str:
    """``prefill`` or ``decode``: the part aitune-transformers adds to each call's graph key."""
    if key in ("prefill", "decode"):
        return str(key)
    if isinstance(key, tuple):
        for part in key:
            found = phase_of(part)
            if found != "?":
                return found
    return "?"


def serving(wrapped: ait.Module) -> dict[str, str]:
    """For each phase, the backend that serves its calls (and the eager ranges, if any)."""
    found = {}
    for key, route in wrapped.routes.items():
        served = []
        for backend in route.backends:
            precompiled = backend.build_info.get("precompiled")
            if isinstance(precompiled, dict) and "loaded" in precompiled:
                functions = precompiled["loaded"]["functions"]
                served.append(f"{type(backend).__name__}, precompiled ({functions} function(s), no compiling)")
            elif backend.is_jit and not isinstance(backend, ait.TorchEagerBackend):
                # Without precompiled graphs (or without trust_native_code) a JIT backend
                # compiles at load from the stored samples, or at the graph's first call.
                samples = key in wrapped.graphs and wrapped.graphs[key].samples
                served.append(f"{type(backend).__name__}, compiles {'at load' if samples else 'on its first call'}")
            else:
                served.append(type(backend).__name__)
        if route.eager_up_to is not None:
            served.append(f"eager up to batch {route.eager_up_to}")
        found[phase_of(key)] = ", ".join(served)
    return dict(sorted(found.items(), key=lambda item: item[0] != "prefill"))


# ---------------------------------------------------------------------- tune and save


def tune_and_save(out: Path, new_tokens: int, precompile: bool = True) -> None:
    from aitune_inductor import TorchInductorJitBackend

    torch.manual_seed(0)
    config = GPT2Config(**CONFIG)
    model = build_model(config)
    dataset = prompts(NUM_PROMPTS, seed=1, vocab_size=config.vocab_size)
    reference = [generate(model, p[None], new_tokens) for p in dataset[:2]]

    wrapped = ait.Module(model, "gpt2")
    # precompile=True: each graph is compiled ahead of time and kept with its kernels, so the
    # deploying process traces and compiles nothing (see the README).
    strategy = ait.MaxThroughputStrategy(
        backends=[TorchInductorJitBackend(precompile=precompile), ait.TorchEagerBackend()],
        profile=ait.ProfileConfig(max_batch_search=False),  # tune for the batch sizes asked for, no more
    )
    started = time.perf_counter()
    # Decode calls see caches of PROMPT_LENGTH .. PROMPT_LENGTH + new_tokens - 2 tokens: the
    # tuned range. A longer generation later would run its later steps eagerly (with a warning).
    report = ait.tune(
        lambda batch: generate(wrapped, batch, new_tokens), dataset, batch_sizes=[1, 2], strategy=strategy
    )
    print(f"tuned in {time.perf_counter() - started:.1f} s (prompts of {PROMPT_LENGTH} tokens, {new_tokens} new)")
    phases = {route.graph.name: phase_of(key) for key, route in wrapped.routes.items()}
    for graph in report.graphs:
        phase = phases.get(graph.graph, "?")
        for size in (1, 2):
            winner = graph.serving_at(size)
            if winner is None:  # no candidate measured faster than eager by enough: the original module serves
                tried = "; ".join(
                    f"{c.backend} {c.status}: {c.reason[:80]}"
                    for c in graph.candidates
                    if c.reason and c.backend != "TorchEagerBackend()"
                )
                print(f"  {phase:8} batch {size}: eager ({tried or 'no candidate cleared the gate'})")
            else:
                speedup = winner.speedups.get(size)
                vs_eager = f", {speedup.describe()} eager's throughput in tuning" if speedup else ""
                print(f"  {phase:8} batch {size}: {winner.backend}{vs_eager}")

    ait.config.fallback = "raise"  # every call must be served by what was tuned
    tuned = [generate(wrapped, p[None], new_tokens) for p in dataset[:2]]
    same = all(torch.equal(a, b) for a, b in zip(reference, tuned, strict=True))
    print(f"tokens identical to eager after tuning: {'yes' if same else 'NO'}")

    ait.save(wrapped, out / CHECKPOINT)
    config.to_json_file(out / CONFIG_FILE)
    torch.save(model.state_dict(), out / WEIGHTS_FILE)
    torch.save({"prompts": torch.stack(dataset[:2]), "tokens": torch.cat(reference)}, out / TOKENS_FILE)
    print(f"saved {out / CHECKPOINT} (and {CONFIG_FILE}, {WEIGHTS_FILE} beside it)")
    if not same:
        raise SystemExit(1)


# ---------------------------------------------------------------------- load and generate


def compiles() -> str:
    """What torch compiled in this process so far, from its own counters."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return (
        f"Dynamo traced {counters['frames']['ok']} frame(s); Inductor generated {inductor['fxgraph_cache_miss']} "
        f"graph(s) and found {inductor['fxgraph_cache_hit']} in its cache"
    )


def deploy(out: Path, new_tokens: int, trust: bool) -> int:
    """In a fresh process: load the checkpoint, generate, compare with eager, time decode steps."""
    config = GPT2Config.from_json_file(out / CONFIG_FILE)
    weights = torch.load(out / WEIGHTS_FILE, weights_only=True)
    eager = build_model(config)
    eager.load_state_dict(weights)

    started = time.perf_counter()
    # The checkpoint holds precompiled graphs with their kernels: native code. This
    # process wrote it a moment ago, so it trusts it; without trust_native_code=True the
    # graphs are left unread and both compile again.
    tuned = ait.load(build_model(config), out / CHECKPOINT, trust_native_code=trust)
    print(f"loaded in {time.perf_counter() - started:.2f} s (fresh process, trust_native_code={trust}): {compiles()}")
    for phase, backend in serving(tuned).items():
        print(f"  {phase:8} served by {backend}")

    ait.config.fallback = "raise"  # a call outside the tuned graphs and shapes fails instead of running eagerly
    stored = torch.load(out / TOKENS_FILE, weights_only=True)
    with torch.no_grad():
        started = time.perf_counter()
        first = tuned(input_ids=stored["prompts"][:1], use_cache=True)
        prefill_s = time.perf_counter() - started
        started = time.perf_counter()
        tuned(input_ids=first.logits[:, -1:].argmax(-1), cache=first.cache, use_cache=True)
        decode_s = time.perf_counter() - started
    print(f"first calls: prefill {prefill_s * 1e3:.0f} ms, decode {decode_s * 1e3:.0f} ms: {compiles()}")
    new_prompts = torch.stack(prompts(2, seed=2, vocab_size=config.vocab_size))
    checks = {
        "prompts from tuning, batch 1": (stored["prompts"][:1], stored["tokens"][:1]),
        "new prompts, batch 1": (new_prompts[:1], None),
        "new prompts, batch 2": (new_prompts, None),
    }
    same = True
    for name, (prompt, expected) in checks.items():
        started = time.perf_counter()
        got = generate(tuned, prompt, new_tokens)
        took = time.perf_counter() - started
        want = generate(eager, prompt, new_tokens)
        ok = torch.equal(got, want) and (expected is None or torch.equal(got, expected))
        same = same and ok
        print(f"  {name}: {new_tokens} tokens identical to eager: {'yes' if ok else 'NO'} ({took * 1e3:.0f} ms)")
    print(f"tokens identical: {'yes' if same else 'NO'}")

    # Alternate the variants round by round, so the machine's load drifts over both alike.
    prompt, steps = new_prompts[:1], new_tokens - 1
    times: dict[str, list[float]] = {"eager": [], "aitune": []}
    for index in range(TIMING_ROUNDS + 1):
        order = ["eager", "aitune"] if index % 2 == 0 else ["aitune", "eager"]
        for variant in order:
            seconds = decode_step_s(eager if variant == "eager" else tuned, prompt, steps)
            if index:  # the first round warms up
                times[variant].append(seconds)
    eager_ms, tuned_ms = (statistics.median(times[v]) * 1e3 for v in ("eager", "aitune"))
    print(
        f"decode step, batch 1, median of {TIMING_ROUNDS} rounds of {steps} steps, "
        f"{torch.get_num_threads()} thread(s): "
        f"eager {eager_ms:.2f} ms, aitune {tuned_ms:.2f} ms ({eager_ms / tuned_ms:.2f}x)"
    )
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=["all", "deploy"], default="all", help=argparse.SUPPRESS)
    parser.add_argument("out", nargs="?", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", dest="out_dir", type=Path, help="keep the checkpoint here (default: a temporary folder)"
    )
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens to generate per prompt (default 32)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument(
        "--untrusted",
        action="store_true",
        help="load without trust_native_code: the precompiled graphs and compile cache are not used",
    )
    parser.add_argument(
        "--no-precompile",
        dest="precompile",
        action="store_false",
        help="tune a plain JIT backend: its checkpoint carries only the compile cache, and compiles where loaded",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    if args.command == "deploy":
        if args.out is None:
            parser.error("deploy needs the folder written by the tuning step")
        return deploy(args.out, args.new_tokens, trust=not args.untrusted)

    with tempfile.TemporaryDirectory(prefix="gpt2-greedy-") as temporary:
        out = args.out_dir or Path(temporary)
        out.mkdir(parents=True, exist_ok=True)
        print("== tune and save")
        tune_and_save(out, args.new_tokens, args.precompile)
        print("== load in a fresh process and generate")
        command = [sys.executable, __file__, "deploy", str(out), "--new-tokens", str(args.new_tokens)]
        command += ["--threads", str(args.threads)] + (["--untrusted"] if args.untrusted else [])
        with tempfile.TemporaryDirectory(prefix="gpt2-greedy-inductor-") as empty:
            # A new machine: an empty Inductor cache, so only what the checkpoint carries can help.
            environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": empty}
            return subprocess.run(command, check=False, env=environment).returncode


if __name__ == "__main__":
    sys.exit(main())
