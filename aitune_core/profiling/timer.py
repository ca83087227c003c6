"""Where profiling gets its times: the wall clock, or latencies given by a test or a bench.

Strategies decide on timings, so a strategy cannot be tested on a shared machine if
the timings come from its clock: a test's verdict would depend on what else runs.
Every timing goes through a :class:`Timer`, and :class:`ScriptedTimer` returns given
latencies (with seeded noise and outliers when a test wants them), so a strategy's
choice can be tested exactly and repeatably.
"""

from __future__ import annotations

import abc
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from aitune_core.validation.inputs import CallInputs

EAGER = "eager"
"""The name under which the original module (the reference) is timed."""

Latency = float | Callable[[int], float]
"""Seconds per call: a constant, or a function of the batch size."""


class Timer(abc.ABC):
    """Runs and times calls of one variant (eager or a candidate backend)."""

    @abc.abstractmethod
    def warm(self, name: str, fn: Callable[..., Any], call: CallInputs, iterations: int) -> None:
        """Run ``fn`` untimed, so that first-call costs (allocation, lazy init) are not measured."""

    @abc.abstractmethod
    def time(self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int) -> list[float]:
        """Seconds taken by each of ``calls`` calls of ``fn``, in order."""


class WallClock(Timer):
    """Real calls, timed with ``perf_counter``; CUDA work is waited for before each reading."""

    def warm(self, name: str, fn: Callable[..., Any], call: CallInputs, iterations: int) -> None:
        sync = synchronizer(call)
        with torch.no_grad():
            for _ in range(iterations):
                args, kwargs = call.bound()
                fn(*args, **kwargs)
        sync()

    def time(self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int) -> list[float]:
        sync = synchronizer(call)
        latencies = []
        with torch.no_grad():
            for _ in range(calls):
                args, kwargs = call.bound()
                if call.fresh is not None:
                    sync()  # the copy is made before the clock starts
                tick = time.perf_counter()
                fn(*args, **kwargs)
                sync()
                latencies.append(time.perf_counter() - tick)
        return latencies


class ScriptedTimer(Timer):
    """Latencies given per variant name, optionally with seeded noise and outliers; calls are not run.

    latencies: seconds per call by variant name: ``"eager"`` for the original module,
        else the backend's ``describe()`` (``"NoDelayBackend()"``). A function of the
        batch size gives a latency per batch size.
    default: the latency of a variant that is not named; without one, such a variant
        is an error that lists the names given.
    noise: relative spread: each call takes ``latency * (1 + noise * gauss)``, never
        less than 10% of the latency.
    outlier_rate, outlier_factor: the share of calls that take ``outlier_factor`` times
        longer (a GC pause, a preempted thread).
    """

    def __init__(
        self,
        latencies: Mapping[str, Latency],
        *,
        default: Latency | None = None,
        noise: float = 0.0,
        outlier_rate: float = 0.0,
        outlier_factor: float = 20.0,
        seed: int = 0,
    ) -> None:
        self.latencies = dict(latencies)
        self.default = default
        self.noise = noise
        self.outlier_rate = outlier_rate
        self.outlier_factor = outlier_factor
        self._random = random.Random(seed)
        self.timed: dict[str, int] = {}
        """How many calls were timed per variant name: what a test checks to see that all were measured."""

    def latency(self, name: str, batch_size: int) -> float:
        given = self.latencies.get(name, self.default)
        if given is None:
            raise KeyError(f"ScriptedTimer has no latency for {name!r}; it has {sorted(self.latencies)}")
        return float(given(batch_size)) if callable(given) else float(given)

    def warm(self, name: str, fn: Callable[..., Any], call: CallInputs, iterations: int) -> None:
        return None

    def time(self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int) -> list[float]:
        base = self.latency(name, batch_size)
        self.timed[name] = self.timed.get(name, 0) + calls
        values = []
        for _ in range(calls):
            value = base * max(0.1, 1.0 + self.noise * self._random.gauss(0.0, 1.0)) if self.noise else base
            if self.outlier_rate and self._random.random() < self.outlier_rate:
                value *= self.outlier_factor
            values.append(value)
        return values


def synchronizer(call: CallInputs) -> Callable[[], None]:
    """What waits for the device: ``torch.cuda.synchronize`` when an input lives on CUDA."""
    for value in (*call.args, *call.kwargs.values()):
        if isinstance(value, torch.Tensor) and value.is_cuda:
            return torch.cuda.synchronize
    return lambda: None
