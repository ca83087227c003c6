"""The demo CNN served by aitune-ray's Ray Serve application: tuned against eager, over HTTP, and a replica killed.

The demo CNN is tuned at batch 1 to 8 with ONNX Runtime against eager (at ``--threads``,
which the replicas then ask Ray for) and saved; one Ray on 127.0.0.1 serves two
applications of that checkpoint with one replica each: ``/tuned/`` (the tuned routes) and
``/eager/`` (``eager=True``: the model's own forward with the same weights). The bounded
load generator (:mod:`bench.serve_load`) sends a fixed count of single-image requests
at a fixed concurrency, every answer checked against eager's outputs computed here
beforehand. Rounds alternate the two applications (only one is loaded at a time); each
reports p50 and p99 latency and throughput, and the tuned / eager throughput ratio
within each round. Then a replica of ``/tuned/`` is killed (SIGKILL) a third of the way
into a run: Serve starts a new one, and the run reports how many requests failed, how
many were in flight at the kill, and when the new replica answered.

``python -m bench ray_serve [--threads N|default]``, in a process of its own (Ray must be
imported after its local-only mode is set); ``--quick``: one round of 200 requests;
``AITUNE_BENCH_SERVE_COUNT=N``: N requests a run. ``AITUNE_BENCH_LOAD=1`` runs it beside
bursty CPU neighbours. Needs aitune-ray with its serve extra and aitune-onnx.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import torch
from torch import nn

import aitune_core as ait
from aitune_core.demo.models import DemoCNN, cnn_samples
from aitune_core.testing.timing import FAST_PROFILE
from bench.neighbours import bursty_neighbours, load_wanted
from bench.serve_load import Interruption, LoadRun, Request, run_load
from bench.timing import Options, Result, Stats, percentile

NAME = "ray serve, demo CNN, 1 image a request"
SIZES = [1, 2, 4, 8]
CONCURRENCY = 16
"""Requests in flight at once: two batches of the largest tuned size."""
DISTINCT_INPUTS = 64
FACTORY = "bench.ray_serve:build_cnn"
RESTART_BOUND_S = 180.0


def build_cnn() -> nn.Module:
    """The factory the replicas call: the demo CNN as it was tuned, in eval mode."""
    return DemoCNN().eval()


def run(options: Options) -> list[Result]:
    from aitune_ray.serving import ServeSettings, serve_applications

    count = int(os.environ.get("AITUNE_BENCH_SERVE_COUNT", 0)) or options.rounds(2000, 200)
    rounds = options.rounds(3, 1)
    torch.set_num_threads(options.threads)
    with tempfile.TemporaryDirectory(prefix="aitune-bench-serve-") as work:
        ait.config.cache_dir = Path(work) / "cache"
        checkpoint, eager = _tuned(Path(work) / "ckpt", options)
        requests = _requests(eager)
        apps = {
            "tuned": ServeSettings(str(checkpoint), FACTORY),
            "eager": ServeSettings(str(checkpoint), FACTORY, eager=True),
        }
        neighbours = bursty_neighbours() if load_wanted() else contextlib.nullcontext()
        # Logical CPUs for both applications' replicas; one is loaded at a time.
        with neighbours, serve_applications(apps, _free_port(), num_cpus=2 * options.threads) as servers:
            urls = {name: server.url for name, server in servers.items()}
            runs = _alternate(urls, requests, count, rounds)
            killed = _killed_replica(urls["tuned"], requests, count)
    return _results(runs, killed, count, options)


def _tuned(folder: Path, options: Options) -> tuple[Path, nn.Module]:
    """The demo CNN tuned with ONNX Runtime against eager at ``options.threads``, saved; and an eager copy."""
    try:
        from aitune_onnx import ONNXRuntimeBackend
    except ImportError as error:
        raise SystemExit(
            f"bench ray_serve tunes with ONNX Runtime: pip install ./plugins/aitune_onnx ({error})"
        ) from None
    torch.manual_seed(0)
    model = build_cnn()
    eager = build_cnn()
    eager.load_state_dict(model.state_dict())
    profile = FAST_PROFILE if options.quick else ait.ProfileConfig()
    wrapped = ait.Module(model, "cnn", strategy=ait.MaxThroughputStrategy([ONNXRuntimeBackend()], profile=profile))
    ait.tune(wrapped, cnn_samples(16), batch_sizes=SIZES, threads=options.threads)  # prints its summary
    ait.save(wrapped, folder)
    print(ait.serving_plan(folder).describe(), flush=True)
    return folder, eager


def _requests(eager: nn.Module) -> list[Request]:
    """Single-image requests and eager's outputs for each, computed here once."""
    generator = torch.Generator().manual_seed(1)
    images = [torch.randn(1, 3, 32, 32, generator=generator) for _ in range(DISTINCT_INPUTS)]
    with torch.no_grad():
        return [Request(json.dumps({"inputs": [x.tolist()]}).encode(), eager(x)) for x in images]


def _alternate(urls: dict[str, str], requests: list[Request], count: int, rounds: int) -> dict[str, list[LoadRun]]:
    """``rounds`` bounded runs of each application, the order swapped every round, each after a warm-up."""
    names = list(urls)
    runs: dict[str, list[LoadRun]] = {name: [] for name in names}
    for index in range(rounds):
        for name in names[index % 2 :] + names[: index % 2]:
            run_load(urls[name], requests, 2 * CONCURRENCY, CONCURRENCY)  # warm-up: dropped
            done = run_load(urls[name], requests, count, CONCURRENCY)
            print(f"  round {index + 1} {name}: {_line(done)}", flush=True)
            runs[name].append(done)
    return runs


def _line(run: LoadRun) -> str:
    latencies = [value * 1e3 for value in run.latencies_s] or [0.0]
    return (
        f"{run.answered} answered in {run.wall_s:.1f} s ({run.throughput:.0f} req/s), p50 "
        f"{percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} ms, "
        f"{len(run.failures)} failed, {len(run.mismatches)} wrong"
    )


def _killed_replica(url: str, requests: list[Request], count: int) -> dict[str, Any]:
    """A bounded run of the tuned application whose replica is killed after a third of the answers."""
    before = _stats(url)

    def kill() -> None:
        os.kill(int(before["pid"]), signal.SIGKILL)

    done = run_load(url, requests, count, CONCURRENCY, Interruption(max(1, count // 3), kill))
    print(f"  replica {before['pid']} killed: {_line(done)}", flush=True)
    deadline = time.perf_counter() + RESTART_BOUND_S
    after: dict[str, Any] = {}
    while time.perf_counter() < deadline:
        with contextlib.suppress(OSError, ValueError):
            after = _stats(url)
            if after.get("pid") != before["pid"]:
                break
        time.sleep(0.2)
    return {"run": done, "old_pid": before["pid"], "new_pid": after.get("pid")}


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        stats: dict[str, Any] = json.loads(answer.read())
    return stats


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _results(runs: dict[str, list[LoadRun]], killed: dict[str, Any], count: int, options: Options) -> list[Result]:
    where = f"{count} requests x {len(runs['tuned'])} rounds, {CONCURRENCY} at once, {options.threads} thread(s)"
    where += ", beside bursty neighbours" if load_wanted() else ""
    results = []
    for name, done in runs.items():
        p50s = [percentile(run.latencies_s, 50) for run in done if run.latencies_s]
        p99s = [percentile(run.latencies_s, 99) for run in done if run.latencies_s]
        results += [
            Result(NAME, f"{name} p50", Stats.of(p50s or [0.0]), "ms", note=where),
            Result(NAME, f"{name} p99", Stats.of(p99s or [0.0]), "ms"),
            Result(NAME, f"{name} throughput", Stats.of([run.throughput for run in done]), "req/s"),
        ]
    ratios = [t.throughput / e.throughput for t, e in zip(runs["tuned"], runs["eager"], strict=True) if e.throughput]
    results.append(Result(NAME, "throughput tuned / eager, per round", Stats.of(ratios or [0.0]), "x"))
    every = [run for done in runs.values() for run in done]
    wrong = sum(len(run.mismatches) for run in every) + len(killed["run"].mismatches)
    failed = sum(len(run.failures) for run in every)
    first = next((m for run in [*every, killed["run"]] for m in run.mismatches), "")
    results.append(Result(NAME, "answers unlike eager's (all runs)", Stats.of([wrong]), "requests", 0, note=first))
    results.append(Result(NAME, "failed requests, no replica killed", Stats.of([failed]), "requests", 0))
    run = killed["run"]
    in_flight = run.in_flight_at_interruption or 0
    restarted = killed["new_pid"] not in (None, killed["old_pid"])
    note = (
        f"{in_flight} in flight at the kill; "
        + (f"Serve restarted it as pid {killed['new_pid']}" if restarted else "no new replica answered in time")
        + (f"; first failure: {run.failures[0][:160]}" if run.failures else "")
    )
    results.append(
        Result(
            NAME, "replica killed mid-load: failed requests", Stats.of([len(run.failures)]), "requests", in_flight, note
        )
    )
    return results
