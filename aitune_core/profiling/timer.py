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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import torch

from aitune_core.profiling.bursts import Bursts, BurstSchedule
from aitune_core.profiling.cpu_time import process_cpu_s
from aitune_core.profiling.idle import wait_until_idle
from aitune_core.profiling.runqueue import runqueue_wait_s
from aitune_core.validation.inputs import CallInputs

EAGER = "eager"
"""The name under which the original module (the reference) is timed."""

Latency = float | Callable[[int], float]
"""Seconds per call: a constant, or a function of the batch size."""


@attrs.frozen
class TimedRound:
    """One variant's part of a round: each call's seconds, and what the process got of the CPU meanwhile.

    ``cpu_s`` against the summed latencies tells a round in which this process was
    preempted (wall time running on without CPU time) from one in which the backend was
    slow; ``waited_s`` (its threads' time runnable but not running) tells it also where
    a thread pool spins through the preemption of one of its threads. Either is None
    where it cannot be known (device time, another OS, a timer that does not say).
    ``cpu_s`` is read from each thread's own clock (:mod:`aitune_core.profiling.cpu_time`).
    """

    latencies: list[float]
    cpu_s: float | None = None
    waited_s: float | None = None

    @property
    def cpu_share(self) -> float | None:
        """CPU seconds per wall second over the calls; None when unknown."""
        wall = sum(self.latencies)
        if self.cpu_s is None or wall <= 0:
            return None
        return self.cpu_s / wall

    @property
    def wait_share(self) -> float | None:
        """Seconds the process's threads waited for a CPU per wall second; None when unknown."""
        wall = sum(self.latencies)
        if self.waited_s is None or wall <= 0:
            return None
        return self.waited_s / wall


class Timer(abc.ABC):
    """Runs and times calls of one variant (eager or a candidate backend)."""

    @abc.abstractmethod
    def warm(self, name: str, fn: Callable[..., Any], call: CallInputs, iterations: int) -> None:
        """Run ``fn`` untimed, so that first-call costs (allocation, lazy init) are not measured."""

    @abc.abstractmethod
    def time(self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int) -> list[float]:
        """Seconds taken by each of ``calls`` calls of ``fn``, in order."""

    def time_round(
        self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int
    ) -> TimedRound:
        """:meth:`time`, with the CPU time the process got during the calls where the timer knows it."""
        return TimedRound(self.time(name, fn, call, batch_size, calls))

    def switch(self) -> None:
        """Before another variant's round: let what the last one left running stop (nothing by default)."""


class WallClock(Timer):
    """Real calls, timed with ``perf_counter``; on CUDA, on the device with events.

    On CUDA a call's time is the device's, between events recorded around it, so that
    a host thread preempted after launching its work does not count; the process's CPU
    time is read around each call either way (see :class:`TimedRound`). Between two
    variants' rounds it waits for the last one's thread pools to sleep
    (:func:`~aitune_core.profiling.idle.wait_until_idle`).
    """

    def __init__(self) -> None:
        self.waited_s = 0.0
        """Seconds spent waiting for idle thread pools between rounds."""

    def switch(self) -> None:
        self.waited_s += wait_until_idle()

    def warm(self, name: str, fn: Callable[..., Any], call: CallInputs, iterations: int) -> None:
        sync = synchronizer(call)
        with torch.no_grad():
            for _ in range(iterations):
                args, kwargs = call.bound()
                fn(*args, **kwargs)
        sync()

    def time(self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int) -> list[float]:
        return self.time_round(name, fn, call, batch_size, calls).latencies

    def time_round(
        self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int
    ) -> TimedRound:
        if on_cuda(call):
            return _device_round(fn, call, calls)
        latencies: list[float] = []
        cpu = waited = 0.0
        known = True
        with torch.no_grad():
            for _ in range(calls):
                args, kwargs = call.bound()
                before = runqueue_wait_s()
                used = process_cpu_s()
                tick = time.perf_counter()
                fn(*args, **kwargs)
                latencies.append(time.perf_counter() - tick)
                cpu += max(0.0, process_cpu_s() - used)
                after = runqueue_wait_s()
                if before is None or after is None:
                    known = False
                else:
                    waited += max(0.0, after - before)
        return TimedRound(latencies, cpu, waited if known else None)


def _device_round(fn: Callable[..., Any], call: CallInputs, calls: int) -> TimedRound:
    """Each call's device time between CUDA events; the host's CPU time against its own wall time."""
    events = []
    wall = cpu = 0.0
    with torch.no_grad():
        for _ in range(calls):
            args, kwargs = call.bound()
            torch.cuda.synchronize()  # a fresh copy of the inputs is made before the clock starts
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            used, tick = process_cpu_s(), time.perf_counter()
            start.record()
            fn(*args, **kwargs)
            end.record()
            end.synchronize()
            wall += time.perf_counter() - tick
            cpu += max(0.0, process_cpu_s() - used)
            events.append((start, end))
    latencies = [start.elapsed_time(end) / 1e3 for start, end in events]
    # The host's share scales the device's latencies: only how far the host was preempted matters.
    return TimedRound(latencies, cpu / wall * sum(latencies) if wall > 0 else None)


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
    load: scripted neighbours (:class:`~aitune_core.profiling.bursts.Bursts`): calls are
        laid on a virtual clock, and those that start while the neighbours are busy are
        slowed; the CPU time and run-queue wait reported show it when the bursts are ``visible``.
    cold: extra seconds of the first calls of a variant after another one ran (its
        weights read back into the caches): ``(2e-3, 1e-3)`` adds 2 ms to the first call
        and 1 ms to the second. Untimed calls (:meth:`warm`) count among them.
    """

    def __init__(
        self,
        latencies: Mapping[str, Latency],
        *,
        default: Latency | None = None,
        noise: float = 0.0,
        outlier_rate: float = 0.0,
        outlier_factor: float = 20.0,
        load: Bursts | None = None,
        cold: Sequence[float] = (),
        seed: int = 0,
    ) -> None:
        self.latencies = dict(latencies)
        self.default = default
        self.noise = noise
        self.outlier_rate = outlier_rate
        self.outlier_factor = outlier_factor
        self._random = random.Random(seed)
        self.load = load
        self._schedule = BurstSchedule(load, random.Random(seed * 7919 + 1)) if load is not None else None
        self.clock = 0.0
        """Virtual seconds of every call timed so far, what the neighbours' bursts are laid on."""
        self.timed: dict[str, int] = {}
        """How many calls were timed per variant name: what a test checks to see that all were measured."""
        self.slowed: dict[str, int] = {}
        """How many of those calls the scripted neighbours slowed, per variant name."""
        self.cold = tuple(cold)
        self._running: str | None = None
        self._since_switch = 0

    def _cold_extra(self, name: str) -> float:
        """What the next call of ``name`` adds for caches that another variant's calls filled."""
        if name != self._running:
            self._running, self._since_switch = name, 0
        extra = self.cold[self._since_switch] if self._since_switch < len(self.cold) else 0.0
        self._since_switch += 1
        return extra

    def latency(self, name: str, batch_size: int) -> float:
        given = self.latencies.get(name, self.default)
        if given is None:
            raise KeyError(f"ScriptedTimer has no latency for {name!r}; it has {sorted(self.latencies)}")
        return float(given(batch_size)) if callable(given) else float(given)

    def warm(self, name: str, fn: Callable[..., Any], call: CallInputs, iterations: int) -> None:
        for _ in range(iterations):
            self._cold_extra(name)

    def time(self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int) -> list[float]:
        return self.time_round(name, fn, call, batch_size, calls).latencies

    def time_round(
        self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int
    ) -> TimedRound:
        base = self.latency(name, batch_size)
        self.timed[name] = self.timed.get(name, 0) + calls
        values = []
        cpu = waited = 0.0
        for _ in range(calls):
            value = base * max(0.1, 1.0 + self.noise * self._random.gauss(0.0, 1.0)) if self.noise else base
            value += self._cold_extra(name)
            if self.outlier_rate and self._random.random() < self.outlier_rate:
                value *= self.outlier_factor
            own = value
            if self._schedule is not None:
                factor = self._schedule.factor_at(self.clock)
                if factor != 1.0:
                    self.slowed[name] = self.slowed.get(name, 0) + 1
                value *= factor
                if self.load is not None and not self.load.visible:
                    own = value
            self.clock += value
            cpu += own
            waited += value - own
            values.append(value)
        return TimedRound(values, cpu, waited)


def on_cuda(call: CallInputs) -> bool:
    """Whether an input of ``call`` lives on a CUDA device."""
    return any(isinstance(value, torch.Tensor) and value.is_cuda for value in (*call.args, *call.kwargs.values()))


def synchronizer(call: CallInputs) -> Callable[[], None]:
    """What waits for the device: ``torch.cuda.synchronize`` when an input lives on CUDA."""
    return torch.cuda.synchronize if on_cuda(call) else lambda: None
