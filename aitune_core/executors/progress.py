"""How far the builds of a tuning run are, and about when they will end.

Builds are most of a tuning run's time, and with several side by side the log alone
does not say how long is left. This counts builds queued, running and done, and
estimates the time left from the builds done so far: the work left is each queued
build at the mean duration of the finished ones, plus what the running ones still
have of it, shared out over the builds that run at once. Before the first build
ends there is nothing to base it on, and the line says "estimating".

The clock is injected, so the estimate is tested without waiting.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from aitune_core.executors.gate import BUILD_GATE
from aitune_core.log import get_logger


class BuildProgress:
    """Builds queued, running and done in one tuning run, with an estimate of the time left."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, log: Any = None) -> None:
        self._clock = clock
        self._log = log if log is not None else get_logger()
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self.queued = 0
        self.running: dict[int, float] = {}
        self.durations: list[float] = []
        self.widest = 1
        """The most builds that ran at once: how many share the work left."""

    def reset(self) -> None:
        """Start counting anew (each ``tune()`` does)."""
        with self._lock:
            self.queued, self.running, self.durations, self.widest = 0, {}, [], 1

    @property
    def done(self) -> int:
        return len(self.durations)

    def submitted(self, count: int = 1) -> None:
        """``count`` builds are planned (a graph's candidates); a negative count drops ones that will not run."""
        with self._lock:
            self.queued = max(0, self.queued + count)

    def started(self) -> int:
        """A queued build started; returns its token for :meth:`finished`."""
        with self._lock:
            self.queued = max(0, self.queued - 1)
            token = next(self._tokens)
            self.running[token] = self._clock()
            self.widest = max(self.widest, len(self.running))
            return token

    def finished(self, token: int) -> None:
        with self._lock:
            began = self.running.pop(token, None)
            if began is not None:
                self.durations.append(self._clock() - began)
            line, left = self._line(), self._left()
        self._log.info("builds", progress=line, left=_describe(left))

    def left_s(self) -> float | None:
        """Seconds until every build counted so far ends; None before the first one ended."""
        with self._lock:
            return self._left()

    def line(self) -> str:
        """``"3 done, 2 running, 1 queued, about 40 s left"``, or ``"..., estimating"``."""
        with self._lock:
            return f"{self._line()}, {_describe(self._left())}"

    def _line(self) -> str:
        return f"{self.done} done, {len(self.running)} running, {self.queued} queued"

    def _left(self) -> float | None:
        if not self.durations:
            return None
        mean = sum(self.durations) / len(self.durations)
        now = self._clock()
        work = self.queued * mean + sum(max(0.0, mean - (now - began)) for began in self.running.values())
        return work / max(1, self.widest)


def _describe(left: float | None) -> str:
    if left is None:
        return "estimating"
    return f"about {left:.0f} s left"


BUILD_PROGRESS = BuildProgress()
"""This process's count; ``tune()`` resets it, executors move builds through it."""


@contextlib.contextmanager
def running_build(label: str = "", progress: BuildProgress | None = None) -> Iterator[None]:
    """One build of a submitted candidate: it holds the build gate (:mod:`.gate`) and counts as running."""
    progress = progress if progress is not None else BUILD_PROGRESS
    with BUILD_GATE.building(label):
        token = progress.started()
        try:
            yield
        finally:
            progress.finished(token)
