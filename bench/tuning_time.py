"""Tuning time with the artifact store: a second tune() of the same model in a new process.

Each round starts fresh processes on one, initially empty, pair of caches
(``AITUNE_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``), each tuning one model with the
default strategy over the default candidates, one torch thread:

1. cold: nothing stored;
2. warm: the same model and weights again; every candidate should be loaded from the
   store (its row ``reused``) and validated against eager;
3. changed: one weight changed by 1e-3; every candidate should be built again;
4. parallel: cold again, in a second pair of empty caches, with two builds at once
   (``AITUNE_PARALLEL_BUILDS=2``; the default on a machine under four cores is one).

Reported per model: tune() wall time of each (imports excluded), the warm/cold and
parallel/cold ratios (targets <= 0.25 and <= 0.8), and per run how many rows were
reused, built and validated. Models: the demo CNN (batch sizes 1, 2, 4, 8, as
``aitune demo``) and timm resnet18 at 64x64 (batch sizes 1 and 4, as the selection
bench); where timm and transformers are installed, also timm mobilenetv3 (small, 64x64,
batch sizes 1 and 4) and the models matrix's tiny real architectures (ViT-Tiny, BERT,
T5 encoder: built, gathered and batched as ``tests_models/model_cases.py`` does).

``python -m bench tuning_time`` runs it; ``python -m bench.tuning_time --child MODEL
[--changed]`` is one tune() in this process, printing its numbers as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.timing import ROOT, Options, Result, Stats, median

RATIO_TARGET = 0.25
PARALLEL_TARGET = 0.8
MODELS = {"cnn": [1, 2, 4, 8], "resnet18": [1, 4], "mobilenetv3": [1, 4]}
MATRIX = ("timm_vit_tiny", "bert_tiny", "t5_encoder_tiny")
"""Cases of the models matrix, tuned as tests_models tunes them but with the default candidates."""
NEEDS = {
    "resnet18": "timm",
    "mobilenetv3": "timm",
    "timm_vit_tiny": "timm",
    "bert_tiny": "transformers",
    "t5_encoder_tiny": "transformers",
}


def _build(model_name: str) -> tuple[Any, list[Any], list[int], Any]:
    """The model, its samples, its batch sizes, and what wraps the ``ait.Module`` for gathering."""
    if model_name in MATRIX:
        sys.path.insert(0, str(ROOT / "tests_models"))
        from model_cases import CASES, TUNE_SEED  # type: ignore[import-not-found]

        case = CASES[model_name]
        return case.build(TUNE_SEED), case.dataset(), case.batch_sizes, case.gather
    from bench.selection import make_model  # the selection bench's models: the same seeds and samples

    return (*make_model(model_name), MODELS[model_name], None)


def _child(model_name: str, changed: bool) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    import aitune_core as ait

    torch.manual_seed(0)
    model, samples, batch_sizes, gather = _build(model_name)
    if changed:
        with torch.no_grad():
            next(iter(model.parameters())).view(-1)[0] += 1e-3
    wrapped = ait.Module(model, f"bench-tuning-time-{model_name}")
    started = time.perf_counter()
    report = ait.tune(wrapped if gather is None else gather(wrapped), samples, batch_sizes=batch_sizes)
    tune_s = time.perf_counter() - started
    rows = [c for g in report.graphs for c in g.candidates]
    tried = [c for c in rows if c.status not in ("skipped",)]
    return {
        "tune_s": tune_s,
        "phases": dict(report.timings),
        "rows": [
            {"backend": c.backend, "status": c.status, "reused": c.reused, "validated": c.max_abs_error is not None}
            for c in rows
        ],
        "tried": len(tried),
        "reused": sum(c.reused for c in tried),
        "validated": sum(c.max_abs_error is not None for c in tried),
        "selected": [g.selected.backend if g.selected else None for g in report.graphs],
    }


def _tune_in_new_process(
    model_name: str, caches: Path, changed: bool = False, parallel: bool = False
) -> dict[str, Any]:
    env = {
        **os.environ,
        **({"AITUNE_PARALLEL_BUILDS": "2"} if parallel else {}),
        "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
        "AITUNE_CACHE_DIR": str(caches / "aitune"),
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "bench.tuning_time", "--child", model_name, *(["--changed"] if changed else [])]
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"tuning_time child failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _models() -> list[str]:
    """Every model this environment can build, or those ``AITUNE_BENCH_MODELS`` names (comma-separated)."""
    chosen = [name for name in os.environ.get("AITUNE_BENCH_MODELS", "").split(",") if name]
    available = [
        name for name in (*MODELS, *MATRIX) if name not in NEEDS or importlib.util.find_spec(NEEDS[name]) is not None
    ]
    return [name for name in available if not chosen or name in chosen]


def run(options: Options) -> list[Result]:
    results = []
    for model_name in _models():
        runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": [], "changed": [], "parallel": []}
        for _ in range(options.rounds(2, 1)):
            with tempfile.TemporaryDirectory(prefix="aitune-tuning-time-") as folder:
                for kind in ("cold", "warm", "changed"):
                    runs[kind].append(_tune_in_new_process(model_name, Path(folder), changed=kind == "changed"))
            with tempfile.TemporaryDirectory(prefix="aitune-tuning-time-") as folder:
                runs["parallel"].append(_tune_in_new_process(model_name, Path(folder), parallel=True))
        ratio = median([w["tune_s"] / c["tune_s"] for c, w in zip(runs["cold"], runs["warm"], strict=True)])
        parallel = median([p["tune_s"] / c["tune_s"] for c, p in zip(runs["cold"], runs["parallel"], strict=True)])
        ratios = {"warm": {"warm_over_cold": ratio}, "parallel": {"parallel_over_cold": parallel}}
        for kind, measured in runs.items():
            last = measured[-1]
            note = f"reused {last['reused']} of {last['tried']} rows, validated {last['validated']}"
            if kind == "warm":
                note = f"{ratio:.3f}x the cold tune (target <= {RATIO_TARGET}); " + note
            if kind == "parallel":
                note = f"{parallel:.3f}x the cold tune (target <= {PARALLEL_TARGET}); " + note
            results.append(
                Result(
                    f"tune() {model_name}, defaults",
                    kind,
                    Stats.of([m["tune_s"] for m in measured]),
                    "s",
                    note=note,
                    extra={"runs": measured, **ratios.get(kind, {})},
                )
            )
        if ratio > RATIO_TARGET:
            print(f"{model_name}: warm tune() is {ratio:.3f}x the cold one (target <= {RATIO_TARGET})", file=sys.stderr)
    return results


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "--child":
        sys.exit(
            "python -m bench.tuning_time --child MODEL [--changed] runs one tune(); "
            "the bench is `python -m bench tuning_time`"
        )
    print(json.dumps(_child(sys.argv[2], "--changed" in sys.argv[3:])))
