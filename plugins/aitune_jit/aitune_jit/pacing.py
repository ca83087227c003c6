"""The JIT's work in the serving process, paced by serving calls: each piece starts in a gap between them.

Candidates are validated and timed in this process, at its own thread count, since
that is where and how they will serve (and an ONNX Runtime or OpenVINO winner keeps the
thread pool it was made with). Done beside serving calls, both ran slower: two thread
teams on the same cores. So the timer waits for a gap before every call it times or
warms with, and times a call again when a serving call came while it ran (its time was
shared); the module guard waits for a gap before every step (a candidate restored,
validated, profiled). A serving call thus runs beside at most one such piece of work,
and the times compared are those of calls that had the cores to themselves, as they
will have when serving.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

from aitune_core.guard import ModuleGuard
from aitune_core.profiling.timer import TimedRound, Timer
from aitune_core.validation.inputs import CallInputs
from aitune_jit.serving import ServingCalls

RETAKES = 3
"""Times a call is timed again at most when serving calls keep coming during it; the last time is kept."""


class PacedTimer(Timer):
    """``inner``'s times, one call at a time, each in a gap between serving calls."""

    def __init__(self, inner: Timer, calls: ServingCalls, retakes: int = RETAKES) -> None:
        self.inner = inner
        self.calls = calls
        self.retakes = retakes
        self.retaken = 0
        """Calls timed again because a serving call came while they ran."""

    def warm(self, name: str, fn: Callable[..., Any], call: CallInputs, iterations: int) -> None:
        for _ in range(iterations):
            self.calls.wait_for_gap()
            self.inner.warm(name, fn, call, 1)

    def time(self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int) -> list[float]:
        return self.time_round(name, fn, call, batch_size, calls).latencies

    def time_round(
        self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int
    ) -> TimedRound:
        latencies: list[float] = []
        cpu: float | None = 0.0
        for _ in range(calls):
            for attempt in range(self.retakes + 1):
                stamp = self.calls.wait_for_gap()
                timed = self.inner.time_round(name, fn, call, batch_size, 1)
                if attempt == self.retakes or not self.calls.came_since(stamp):
                    break
                self.retaken += 1
            latencies += timed.latencies
            cpu = None if cpu is None or timed.cpu_s is None else cpu + timed.cpu_s
        return TimedRound(latencies, cpu)

    def switch(self) -> None:
        self.inner.switch()


class PacedGuard(ModuleGuard):
    """A module guard whose every step starts in a gap between serving calls."""

    def __init__(self, module: nn.Module, name: str, calls: ServingCalls, log: Any = None) -> None:
        super().__init__(module, name, log=log)
        self.calls = calls

    @contextlib.contextmanager
    def step(self, step: str) -> Iterator[None]:
        self.calls.wait_for_gap()
        with super().step(step):
            yield
