"""Does tuning choose well, and the same every time? (the "Selection" numbers)

* quality and agreement: each model is tuned with the defaults (``MaxThroughputStrategy()``
  over every installed plugin's default candidates) in ``n`` fresh processes. In each
  process, after ``tune()``, every candidate that passed validation is tuned again on
  its own (``OneBackendStrategy(b).enable_performance_validation(False)``), over every
  size the tune measured, and the tuned module, eager and each single backend are timed
  independently, alternating round by round at ``--threads``. Quality at a batch size is
  the best single variant's median time (eager included) over the tuned module's: 1.0
  means the routing is as fast as the best one could have picked. For resnet18
  (``AITUNE_BENCH_ALONE``) each variant is also timed alone in a process of its own
  (:mod:`bench.alone`). Agreement: how many runs chose the
  most common routing (the backend serving each of the user's batch sizes). Models: the
  bundled demo models, and timm's resnet18 and a tiny transformers BERT where those
  packages are installed (random weights, nothing downloaded);
* traps and the warm-cache tune: :mod:`bench.selection_traps`.

Every tune runs in a subprocess (``python -m bench.selection JOB``) so that nothing
compiled or cached in memory by one run helps the next. The Inductor cache on disk is
torch's default one, as a user's would be: only the first run on a machine compiles
cold. To keep the suite near 15 minutes, the first run of a model builds every validated
backend alone, and later runs only those that came within 3% of the fastest there (the
tuned module and eager are timed in every run). Run it with the interpreter of an
environment that has timm and transformers to include those models.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import alone
from bench.alone import save_variants, time_alone
from bench.neighbours import bursty_neighbours, load_wanted
from bench.timing import ROOT, Options, Ratio, Result, Stats, alternate, calibrate, per_call

QUALITY_TARGET = 0.9
"""The chosen routing's speed over the best single backend's, at every batch size, in every run."""
JOB_TIMEOUT_S = 900
RESULT_MARK = "SELECTION-RESULT "
RETAKEN = re.compile(r"compared .*?retaken=(\d+)")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    label: str
    batch_sizes: tuple[int, ...]
    needs: str = ""
    """A package the model needs (timm, transformers); the model is skipped without it."""


MODELS = (
    ModelSpec("mlp", "demo MLP 512-2048-512", (1, 8)),
    ModelSpec("cnn", "demo CNN, 32x32", (1, 8)),
    ModelSpec("transformer", "demo transformer, seq 32", (1, 8)),
    ModelSpec("resnet18", "timm resnet18, 64x64", (1, 4), "timm"),
    ModelSpec("bert", "BERT tiny (hidden 64, 2 layers), seq 16", (1, 4), "transformers"),
)
CRITERION_A_MODEL = "resnet18"
OTHER_RUNS = int(os.environ.get("AITUNE_BENCH_SELECTION_RUNS", "3"))
"""Fresh-process runs of the other models (resnet18 always gets 5, as criterion (a) asks)."""
ALONE_MODELS = [n for n in os.environ.get("AITUNE_BENCH_ALONE", CRITERION_A_MODEL).split(",") if n]
"""Models whose variants are also timed each alone in a process of its own (:mod:`bench.alone`)."""
ONLY_MODELS = [name for name in os.environ.get("AITUNE_BENCH_SELECTION_MODELS", "").split(",") if name]
"""Measure only these models (comma-separated names from MODELS); empty: all."""


# ---------------------------------------------------------------------- in the subprocess

TIMM_MODELS = {"resnet18": "resnet18", "mobilenetv3": "mobilenetv3_small_100"}
"""timm architectures by bench name, each a 10-class classifier on 64x64 images."""


def make_model(name: str) -> tuple[Any, list[Any]]:
    """A freshly initialised model (seeded, random weights) in eval mode, and its unbatched samples."""
    import torch

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    if name in ("mlp", "cnn", "transformer"):
        from aitune_core.demo.models import build_demo

        return build_demo(name)
    if name in TIMM_MODELS:
        import timm  # type: ignore[import-not-found]

        model = timm.create_model(TIMM_MODELS[name], pretrained=False, num_classes=10).eval()
        return model, [torch.randn(3, 64, 64, generator=generator) for _ in range(8)]
    if name == "bert":
        from transformers import BertConfig, BertModel  # type: ignore[import-not-found]

        config = BertConfig(
            vocab_size=1000,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            max_position_embeddings=64,
        )
        model = BertModel(config).eval()
        return model, [torch.randint(0, 1000, (16,), generator=generator) for _ in range(8)]
    raise ValueError(f"unknown model {name!r}")


def _batch(samples: list[Any], size: int) -> Any:
    import torch

    return torch.stack([samples[i % len(samples)] for i in range(size)])


def _label(backend: Any) -> str:
    import aitune_core as ait

    if backend is None or (isinstance(backend, ait.TorchEagerBackend) and not backend.config.autocast_enabled):
        return "eager"
    return str(backend.describe())


def _route_at(module: Any, size: int) -> str:
    """What serves batch ``size`` in every graph of ``module`` ("eager" where nothing was routed)."""
    labels = []
    for route in module.routes.values():
        ranges = route.ranges(size, size) if route.batch_axis is not None else [(size, size, route.backend)]
        labels += [_label(backend) for first, last, backend in ranges if first <= last]
    return " + ".join(dict.fromkeys(labels)) or "eager"


def _validated(candidate: Any) -> bool:
    """Passed validation (whatever the timing said), and is not plain eager itself."""
    import aitune_core as ait

    blueprint = candidate.blueprint
    if blueprint is None or (isinstance(blueprint, ait.TorchEagerBackend) and not blueprint.config.autocast_enabled):
        return False
    return candidate.status in ("selected", "passed") or (
        candidate.status == "rejected" and candidate.stage == "performance"
    )


def _time_variants(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    import torch

    with torch.no_grad():
        for fn in fns.values():
            for _ in range(3):
                fn()
        variants: dict[str, Callable[[], float]] = {}
        for name, fn in fns.items():
            number = calibrate(fn, target_s=0.05)
            variants[name] = lambda fn=fn, number=number: per_call(fn, number)
        return alternate(variants, rounds=rounds, warmup_rounds=1)


def _selection_job(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    import aitune_core as ait
    from aitune_core.profiling.timer import ScriptedTimer

    torch.set_num_threads(job["threads"])
    ait.config.cache_dir = job["cache_dir"]
    name, sizes = job["model"], list(job["batch_sizes"])
    model, samples = make_model(name)
    wrapped = ait.Module(model, f"selection-{name}")
    start = time.perf_counter()
    # Neighbours run while tuning only: what is measured afterwards is timed on a quiet machine.
    with bursty_neighbours(seed=job.get("seed", 0)) if job.get("load") else contextlib.nullcontext():
        report = ait.tune(wrapped, samples, batch_sizes=sizes)
    tune_s = time.perf_counter() - start
    routing = {str(size): _route_at(wrapped, size) for size in sizes}
    rows = [
        {
            "graph": graph.graph,
            "backend": c.backend,
            "status": c.status,
            "stage": c.stage,
            "serves": c.describe_serves(),
            "reason": c.reason[:160],
            "speedups": {str(size): s.describe() for size, s in c.speedups.items()},
        }
        for graph in report.graphs
        for c in graph.candidates
    ]
    eager_serves = [list(r) for graph in report.graphs for r in graph.eager_serves]

    singles: dict[str, Any] = {}
    single_errors: dict[str, str] = {}
    single_routes: dict[str, dict[str, str]] = {}
    validated = {c.backend: c.blueprint for graph in report.graphs for c in graph.candidates if _validated(c)}
    # Singles span the sizes the tune measured: built for 1-4 against a tuned 1-16, they were other models.
    measured = sorted({*sizes, *(size for graph in report.graphs for c in graph.candidates for size in c.speedups)})
    if job.get("singles") is not None:  # later runs: only those that were fastest alone in the first
        validated = {label: b for label, b in validated.items() if label in job["singles"]}
    for index, (label, blueprint) in enumerate(validated.items()):
        alone = ait.Module(copy.deepcopy(model), f"selection-{name}-single-{index}")
        # Scripted timings: the backend alone must serve every size. With the wall clock,
        # an interval wider than stats.TOO_WIDE is "undecided" even with the gate off, and
        # eager then served some sizes of a "single backend" (seen on resnet18, batch 4).
        timer = ScriptedTimer({"eager": 1.0}, default=1e-6)
        strategy = ait.OneBackendStrategy(blueprint, timer=timer).enable_performance_validation(False)
        try:
            ait.tune(alone, samples, batch_sizes=measured, strategy=strategy)
        except Exception as error:  # reported; the others are still timed
            single_errors[label] = f"{type(error).__name__}: {error}"[:300]
            continue
        singles[label] = alone
        single_routes[label] = {str(size): _route_at(alone, size) for size in sizes}

    timings: dict[str, dict[str, list[float]]] = {}
    for size in sizes:
        x = _batch(samples, size)
        fns: dict[str, Callable[[], Any]] = {
            "aitune": lambda x=x: wrapped(x),
            "eager": lambda x=x: model(x),
        }
        for label, alone in singles.items():
            fns[label] = lambda x=x, alone=alone: alone(x)
        timings[str(size)] = _time_variants(fns, job["rounds"])
    alone_paths = save_variants(wrapped, singles, Path(job["alone_dir"])) if job.get("alone_dir") else {}
    return {
        "alone_paths": alone_paths,
        "model": name,
        "tune_s": tune_s,
        "load": bool(job.get("load")),
        "phases": dict(report.timings),
        "profiling_capped": report.profiling.capped if report.profiling is not None else None,
        "routing": routing,
        "rows": rows,
        "eager_serves": eager_serves,
        "single_routes": single_routes,
        "single_errors": single_errors,
        "timings": timings,
    }


JOBS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"selection": _selection_job, "alone": time_alone}
"""Jobs run in fresh processes; the traps' and the warm-cache tune's are in :mod:`bench.selection_traps`."""


def _worker(argv: list[str]) -> int:
    job = json.loads(argv[0])
    if job["kind"] in JOBS:
        result = JOBS[job["kind"]](job)
    else:
        from bench.selection_traps import TRAP_JOBS

        result = TRAP_JOBS[job["kind"]](job)
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------------- in the bench process


def _spawn(
    job: dict[str, Any], env: dict[str, str] | None = None, timeout_s: float = JOB_TIMEOUT_S
) -> tuple[dict[str, Any], str]:
    """Run one job in a fresh process; returns its result and its log (stderr)."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("AITUNE_EXECUTOR", "AITUNE_ALLOW_LOSSY")}
    full_env.update(env or {})
    completed = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "bench.selection", json.dumps(job)],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(
            f"selection job {job['kind']} failed (exit {completed.returncode}):\n{completed.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len(RESULT_MARK) :]), completed.stderr


def _installed(package: str) -> bool:
    import importlib.util

    return not package or importlib.util.find_spec(package) is not None


def _say(text: str) -> None:
    print(f"  {text}", flush=True)


def _quality(run: dict[str, Any], size: str) -> tuple[float, str, dict[str, float]]:
    """(the tuned module's speed over the best single's, that single's name, every median) at ``size``.

    The best single variant (eager included) has the lowest median time; the quality is the
    median of the per-round ratios ``best / tuned``, so drift between rounds cancels.
    """
    timings = run["timings"][size]
    medians = {name: statistics.median(values) for name, values in timings.items()}
    contenders = {name: value for name, value in medians.items() if name != "aitune"}
    best = min(contenders, key=lambda name: contenders[name])
    ratios = [b / t for b, t in zip(timings[best], timings["aitune"], strict=True)]
    return statistics.median(ratios), best, medians


def _near_best(run: dict[str, Any], within: float = 1.03) -> list[str]:
    """The single backends within ``within`` of the fastest variant alone, at any batch size."""
    found: set[str] = set()
    for size in run["timings"]:
        _, best, medians = _quality(run, size)
        found |= {n for n, v in medians.items() if n not in ("aitune", "eager") and v <= medians[best] * within}
    return sorted(found)


def selection(options: Options, work: Path) -> tuple[list[Result], list[dict[str, Any]]]:
    results: list[Result] = []
    table: list[dict[str, Any]] = []
    for spec in MODELS:
        if ONLY_MODELS and spec.name not in ONLY_MODELS:
            continue
        if not _installed(spec.needs):
            _say(f"{spec.name}: skipped, {spec.needs} is not installed")
            table.append({"spec": spec, "skipped": f"{spec.needs} not installed"})
            continue
        count = options.rounds(5 if spec.name == CRITERION_A_MODEL else OTHER_RUNS, 1)
        runs: list[dict[str, Any]] = []
        singles: list[str] | None = None
        for index in range(count):
            job = {
                "kind": "selection",
                "model": spec.name,
                "batch_sizes": list(spec.batch_sizes),
                "threads": options.threads,
                "cache_dir": str(work / "aitune"),
                "rounds": options.rounds(15, 3),
                "singles": singles,
                "load": load_wanted(),
                "seed": index,
                "alone_dir": str(work / f"alone-{index}") if spec.name in ALONE_MODELS else None,
            }
            started = time.perf_counter()
            try:
                run, log = _spawn(job)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                _say(f"{spec.name} run {index + 1}/{count}: FAILED\n{error}")
                continue
            run["retaken"] = sum(int(n) for n in RETAKEN.findall(log))
            (work / f"{spec.name}-run-{index + 1}.log").write_text(log)  # the tune's own log, to see why it chose
            if run["alone_paths"]:
                run["alone"] = alone.measure(run["alone_paths"], {**job, "rounds": options.rounds(7, 3)})
                _say(
                    f"{spec.name} run {index + 1}/{count}, each variant alone in its own process: "
                    + alone.describe(run)
                )
            runs.append(run)
            if singles is None:
                singles = _near_best(run)
            qualities = {size: _quality(run, size)[0] for size in run["timings"]}
            took = time.perf_counter() - started
            _say(
                f"{spec.name} run {index + 1}/{count} ({took:.0f} s, tune {run['tune_s']:.1f} s, "
                f"profile {run['phases'].get('profile', 0.0):.1f} s, {run['retaken']} rounds retaken"
                f"{', neighbours while tuning' if run['load'] else ''}): "
                + ", ".join(f"batch {s}: {run['routing'][s]} (quality {q:.2f})" for s, q in qualities.items())
            )
        if not runs:
            table.append({"spec": spec, "skipped": "every run failed"})
            continue
        results += _model_results(spec, runs, table)
    return results, table


def _model_results(spec: ModelSpec, runs: list[dict[str, Any]], table: list[dict[str, Any]]) -> list[Result]:
    results: list[Result] = []
    routings = [tuple(run["routing"][str(s)] for s in spec.batch_sizes) for run in runs]
    common, agree = collections.Counter(routings).most_common(1)[0]
    row: dict[str, Any] = {"spec": spec, "runs": len(runs), "agree": agree, "routing": common, "sizes": {}}
    worst_overall = 1.0
    for position, size in enumerate(spec.batch_sizes):
        values, bests = [], []
        for run in runs:
            quality, best, _ = _quality(run, str(size))
            values.append(quality)
            bests.append(best)
        worst_overall = min(worst_overall, min(values))
        best_often = collections.Counter(bests).most_common(1)[0][0]
        chosen = collections.Counter(r[position] for r in routings)
        row["sizes"][size] = {
            "median": statistics.median(values),
            "min": min(values),
            "best": best_often,
            "chosen": ", ".join(f"{name} x{n}" for name, n in chosen.most_common()),
        }
        alone_values = [alone.quality(run["alone"], str(size))[0] for run in runs if run.get("alone")]
        if alone_values:
            row["sizes"][size]["alone"] = (statistics.median(alone_values), min(alone_values))
            results.append(
                Ratio(
                    f"selection {spec.name}, batch {size}",
                    "quality, each variant alone in its own process",
                    Stats.of(alone_values),
                    note=f"worst run {min(alone_values):.2f}",
                    extra={"per_run": [run["alone"] for run in runs if run.get("alone")]},
                )
            )
        results.append(
            Ratio(
                f"selection {spec.name}, batch {size}",
                "quality: best single / chosen",
                Stats.of(values),
                note=f"worst run {min(values):.2f}; fastest alone: {best_often}; chose {row['sizes'][size]['chosen']}",
                extra={"per_run": values, "best_single": bests, "chosen": [r[position] for r in routings]},
            )
        )
    not_alone = sorted(
        {
            f"{label} at batch {size}"
            for run in runs
            for label, routes in run["single_routes"].items()
            for size, served in routes.items()
            if served != label
        }
    )
    row["not_alone"] = not_alone
    tune_times = [run["tune_s"] for run in runs]
    row["tune_s"] = statistics.median(tune_times)
    results.append(
        Result(f"selection {spec.name}", "tune() wall time", Stats.of(tune_times), "s", note=f"{len(runs)} runs")
    )
    met = None
    note = f"{agree} of {len(runs)} runs: {' | '.join(common)}"
    if not_alone:
        note += f"; tuned alone with performance validation off, eager still served {', '.join(not_alone)}"
    if spec.name == CRITERION_A_MODEL:
        met = agree == len(runs) and worst_overall >= QUALITY_TARGET
        note += f"; (a) needs every run >= {QUALITY_TARGET} and 5/5 the same: {'MET' if met else 'NOT MET'}"
    row["met"] = met
    results.append(
        Ratio(
            f"selection {spec.name}",
            "agreement: share of runs with the common routing",
            Stats.of([agree / len(runs)]),
            note=note,
            passed=met,
            extra={"routings": [list(r) for r in routings], "runs": runs},
        )
    )
    table.append(row)
    return results


def markdown(table: list[dict[str, Any]]) -> str:
    """The "selection" table of docs/benchmarks.md."""
    lines = [
        "| model | batch | chosen (runs) | fastest alone | quality median (worst) | agreement | tune() median |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table:
        spec = row["spec"]
        if "skipped" in row:
            lines.append(f"| {spec.label} | - | skipped: {row['skipped']} | | | | |")
            continue
        for size, cell in row["sizes"].items():
            lines.append(
                f"| {spec.label} | {size} | {cell['chosen']} | {cell['best']} | "
                f"{cell['median']:.2f} ({cell['min']:.2f}) | {row['agree']}/{row['runs']} | {row['tune_s']:.1f} s |"
            )
    return "\n".join(lines)


def run(options: Options) -> list[Result]:
    work = Path(tempfile.mkdtemp(prefix="aitune-bench-selection-"))
    started = time.perf_counter()
    from bench.selection_traps import traps, warm_cache

    try:
        results = traps(options, work)
        results += warm_cache(options, work)
        found, table = selection(options, work)
        results += found
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(markdown(table), flush=True)
    print(f"selection suite: {time.perf_counter() - started:.0f} s", flush=True)
    return results


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
