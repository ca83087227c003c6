"""Builds side by side: every graph of every module submitted together, timed one graph after another.

A model with two wrapped blocks is tuned twice: in this process, one build at a time,
and with the default executor building two at a time in child processes. The build
gate records every build and every timing as they start and end (the order of events
is the clock): no timing ever runs while a build does, the builds of both modules
were submitted before the first module was timed, and the report is the one-at-a-time
run's. Timings are scripted, so the verdicts do not depend on the machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from executor_backends import FAST_PROFILE, ArtifactBackend, FastBackend, SlowableMLP
from torch import nn

import aitune_core as ait
from aitune_core.backends import TorchEagerBackend
from aitune_core.config import config
from aitune_core.executors.gate import BUILD_GATE
from aitune_core.log import capture
from aitune_core.reporting.summary import TuneReport


class TwoBlocks(nn.Module):
    def __init__(self, first: nn.Module, second: nn.Module) -> None:
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x)[..., :8].repeat(1, 2))


def _model(unique_name: Callable[..., str]) -> TwoBlocks:
    torch.manual_seed(0)
    blocks = [ait.Module(SlowableMLP(delay_s=0.002).eval(), unique_name(f"block{i}")) for i in range(2)]
    return TwoBlocks(*blocks).eval()


def _tune(model: TwoBlocks, executor: str) -> TuneReport:
    strategy = ait.MaxThroughputStrategy([TorchEagerBackend(), FastBackend(), ArtifactBackend()], profile=FAST_PROFILE)
    samples = [torch.randn(16) for _ in range(4)]
    return ait.tune(model, samples, batch_sizes=[1, 2], strategy=strategy, executor=executor)


def _decisions(report: TuneReport) -> list[Any]:
    return [
        (g.graph, [(c.backend, c.status, c.stage, c.reason, c.describe_serves()) for c in g.candidates])
        for g in report.graphs
    ]


def test_builds_of_every_module_run_together_and_never_beside_a_timing(unique_name: Callable[..., str]) -> None:
    sequential = _tune(_model(unique_name), "inprocess")

    config.parallel_builds = 2
    events: list[tuple[str, str, str]] = []
    BUILD_GATE.listeners.append(lambda kind, event, label: events.append((kind, event, label)))
    try:
        with capture() as logged:
            parallel = _tune(_model(unique_name), "auto")
    finally:
        BUILD_GATE.listeners.clear()

    # Every graph's candidates were submitted at once, in children, before any graph was timed.
    submitted = next(e for e in logged if e["event"] == "builds submitted together")
    assert (submitted["graphs"], submitted["candidates"]) == (2, 6)
    assert logged.index(submitted) < next(i for i, e in enumerate(logged) if e["event"] == "compared")
    # The ahead-of-time candidate was built in a child and loaded here; the JIT ones were built here.
    restored = {e["backend"]: e["how"] for e in logged if e["event"] == "winner restored"}
    assert restored == {"ArtifactBackend()": "loaded from its artifacts"}
    builds = [label for kind, _, label in events if kind == "build"]
    assert len(builds) == 12  # three candidates of two graphs, each starting and ending
    assert {label.split(": ")[0] for label in builds} == {f"{g.module}/{g.graph}" for g in parallel.graphs}

    # No build ever ran while something was timed.
    running, timing = 0, False
    for kind, event, label in events:
        if kind == "build":
            assert not timing, f"{label} built while candidates were timed"
            running += 1 if event == "start" else -1
        else:
            assert running == 0, f"{label} timed while {running} builds ran"
            timing = event == "start"
    assert any(kind == "profile" for kind, _, _ in events)

    # The same rows, verdicts and routes as one build at a time, in this process.
    assert len(parallel.graphs) == 2
    assert _decisions(parallel) == _decisions(sequential)
