"""A greedy-decoding loop over a KV cache: tuned, saved, loaded in a fresh process, same tokens as eager.

The flow of ``examples/gpt2_greedy`` at a smaller scale: a 1-layer GPT-2 with random
weights, tuned at batch sizes 1 and 2 over Inductor JIT, so that the prefill call and
the decode calls (which pass the cache along) are two graphs, each served by Inductor.
Timings are scripted (``steady_timer``), so no verdict depends on the machine's load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers", reason="needs transformers (the plugin's `test` extra)")
pytest.importorskip("aitune_inductor", reason="needs aitune-inductor installed beside aitune-transformers")

from aitune_inductor import TorchInductorJitBackend

import aitune_core as ait
from aitune_core.plugin_api import config
from aitune_core.testing.timing import SHORT_PROFILE, steady_timer

NEW_TOKENS = 8
PROMPT_LENGTH = 6
GPT2 = {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 100, "n_positions": 64}

# What a deploying process runs: the model from its config and weights, the checkpoint, generation.
CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch
    from torch._dynamo.utils import counters
    from torch._inductor import cpp_builder
    from transformers import GPT2Config, GPT2LMHeadModel
    import aitune_core as ait

    libraries = []  # every shared library the C++ compiler builds in this process
    build = cpp_builder.CppBuilder.build
    cpp_builder.CppBuilder.build = lambda self: libraries.append(self.get_target_file_path()) or build(self)

    folder = Path(sys.argv[1])
    model = GPT2LMHeadModel(GPT2Config(**json.loads((folder / "config.json").read_text()))).eval()
    model.load_state_dict(torch.load(folder / "weights.pt", weights_only=True))
    tuned = ait.load(model, folder / "checkpoint", trust_native_code=sys.argv[3] == "trust")
    ait.config.fallback = "raise"  # every call must be routed to what was tuned

    def generate(m, prompt, new_tokens):
        with torch.no_grad():
            out = m(input_ids=prompt, use_cache=True)
            tokens = [prompt]
            for _ in range(new_tokens - 1):
                tokens.append(out.logits[:, -1:].argmax(-1))
                out = m(input_ids=tokens[-1], cache=out.cache, use_cache=True)
            tokens.append(out.logits[:, -1:].argmax(-1))
        return torch.cat(tokens, dim=1)

    prompts = torch.load(folder / "prompts.pt", weights_only=True)
    tokens = generate(tuned, prompts, int(sys.argv[2]))
    served = {repr(key): type(route.backend).__name__ for key, route in tuned.routes.items()}
    built = [path for path in libraries if path.endswith(".so")]
    print(json.dumps({"tokens": tokens.tolist(), "served": served, "frames": counters["frames"]["ok"], "built": built}))
    """
)


def generate(model: Any, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding: one prefill call, then one decode call per new token with the cache passed along."""
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True)
        tokens = [prompt]
        for _ in range(new_tokens - 1):
            tokens.append(out.logits[:, -1:].argmax(-1))
            out = model(input_ids=tokens[-1], cache=out.cache, use_cache=True)
        tokens.append(out.logits[:, -1:].argmax(-1))
    return torch.cat(tokens, dim=1)


def phase_of(key: Hashable) -> str | None:
    """The phase part (``prefill`` or ``decode``) the plugin adds to a graph key."""
    if key in ("prefill", "decode"):
        return str(key)
    if isinstance(key, tuple):
        return next((found for part in key if (found := phase_of(part)) is not None), None)
    return None


def child_env(cache_dir: Path) -> dict[str, str]:
    """The environment of the fresh process: the same aitune packages, a private aitune cache."""
    import aitune_inductor

    import aitune_core
    import aitune_transformers

    paths = {str(Path(str(m.__file__)).parents[1]) for m in (aitune_core, aitune_inductor, aitune_transformers)}
    pythonpath = os.pathsep.join([*sorted(paths), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": pythonpath, "AITUNE_CACHE_DIR": str(cache_dir), "HF_HUB_OFFLINE": "1"}


@pytest.fixture(autouse=True)
def _settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config.reset()
    config.timer = steady_timer()  # which candidate wins never depends on the machine's load
    config.cache_dir = tmp_path / "aitune-cache"
    try:
        yield
    finally:
        config.reset()


@pytest.mark.together  # it needs aitune-inductor beside this plugin, which only tests_all installs
@pytest.mark.parametrize("precompile", [False, True], ids=["jit", "precompiled"])
def test_greedy_decoding_tunes_and_loads_in_a_fresh_process(tmp_path: Path, precompile: bool) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    gpt2_config = GPT2Config(**GPT2)
    model = GPT2LMHeadModel(gpt2_config).eval()
    dataset = [torch.randint(0, GPT2["vocab_size"], (PROMPT_LENGTH,)) for _ in range(4)]
    prompts = torch.stack(dataset[:2])
    eager = {size: generate(model, prompts[:size], NEW_TOKENS) for size in (1, 2)}

    wrapped = ait.Module(model, "gpt2-greedy-test")
    jit = TorchInductorJitBackend(precompile=precompile)
    strategy = ait.MaxThroughputStrategy(backends=[jit], profile=SHORT_PROFILE)
    strategy.enable_performance_validation(False)  # this checks build, validation, routing and loading, not speed
    report = ait.tune(
        lambda batch: generate(wrapped, batch, NEW_TOKENS), dataset, batch_sizes=[1, 2], strategy=strategy
    )

    phases = {route.graph.name: phase_of(key) for key, route in wrapped.routes.items()}
    assert sorted(phases.values(), key=str) == ["decode", "prefill"], phases
    for graph in report.graphs:
        selected = graph.selected
        assert selected is not None and selected.status == "selected", (phases[graph.graph], graph.candidates)
        assert selected.backend == jit.describe(), (phases[graph.graph], graph.candidates)
        assert selected.max_abs_error is not None, "the selected backend was validated against eager"
        assert graph.serving_at(1) is selected and graph.serving_at(2) is selected
    decode = next(route for route in wrapped.routes.values() if phases[route.graph.name] == "decode")
    assert isinstance(decode.backend, TorchInductorJitBackend)
    assert decode.eager_up_to is None, "eager serves no batch range of the decode graph"

    config.fallback = "raise"  # a call outside the tuned graphs or shapes fails instead of running eagerly
    for size in (1, 2):
        assert torch.equal(generate(wrapped, prompts[:size], NEW_TOKENS), eager[size]), f"batch {size} after tune"

    ait.save(wrapped, tmp_path / "checkpoint")
    (tmp_path / "config.json").write_text(json.dumps(GPT2))
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    torch.save(prompts, tmp_path / "prompts.pt")
    (tmp_path / "child.py").write_text(CHILD)
    completed = subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), str(tmp_path), str(NEW_TOKENS), "trust"],
        env={**child_env(tmp_path / "child-cache"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "child-inductor")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    loaded = json.loads(completed.stdout.strip().splitlines()[-1])
    assert loaded["tokens"] == eager[2].tolist(), "tokens after a fresh-process load differ from eager's"
    assert sorted(loaded["served"].values()) == ["TorchInductorJitBackend"] * 2, loaded["served"]
    if precompile:  # prefill and decode, batch 1 and 2: served by saved functions and kernels alone
        assert loaded["frames"] == 0 and loaded["built"] == [], loaded
    else:
        assert loaded["frames"] > 0, "a plain JIT checkpoint traces where it is loaded"
