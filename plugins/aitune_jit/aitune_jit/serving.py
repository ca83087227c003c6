"""Which serving calls are in flight, so that the JIT's own work in this process fits in the gaps between them.

At torch's default thread count a serving call's OpenMP team takes every core, and it
is only as fast as its slowest member: one more runnable thread on those cores (the
JIT timing a candidate at the same thread count, a thread pool restored for the winner)
deschedules a member, and the others spin at the next barrier. Measured on a 2-core
machine, that made the serving loop's p99 call 50 ms later than without aitune. So
while a tuning job runs, the model's own ``__call__`` (:mod:`aitune_jit.root`) marks
each serving call here, and the tuning thread starts each piece of its work (a timed
call, a build or validation step, the live check) in a gap between serving calls
(:mod:`aitune_jit.pacing`). A serving call then runs beside at most the one piece that
had started before it came.

Marking costs two list operations and an event per call, and only while a tuning job
runs: a tuned model's calls check one flag.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

SETTLE_S = 0.002
"""Quiet time after a serving call before the JIT starts work: its thread pools stop spinning meanwhile."""
WAIT_LIMIT_S = 0.05
"""The longest the JIT waits for a gap: a model served back to back still gets tuned, one piece at a time."""
_SLICE_S = 0.005
"""How long one wait for a serving call to end lasts before the calls in flight are looked at again."""


class ServingCalls:
    """Serving calls in flight (marked by the serving threads) and the gaps between them (waited for by the JIT)."""

    def __init__(
        self,
        settle_s: float = SETTLE_S,
        wait_limit_s: float = WAIT_LIMIT_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.watching = False
        """Whether serving calls are marked: only while a tuning job runs."""
        self.settle_s = settle_s
        self.wait_limit_s = wait_limit_s
        self._clock = clock
        self._in_flight: list[None] = []  # append and pop are atomic: no lock on the serving path
        self._starts = itertools.count(1)
        self._last_start = 0
        self._last_end = 0.0
        self._idle = threading.Event()
        self.waited = threading.Event()
        """Set when the JIT first had to wait for a serving call to end (tests wait for it)."""

    # ------------------------------------------------------------------ the serving side
    def serve(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``call(*args, **kwargs)``, marked in flight while it runs."""
        in_flight = self._in_flight
        in_flight.append(None)
        self._last_start = next(self._starts)
        try:
            return call(*args, **kwargs)
        finally:
            in_flight.pop()
            if not in_flight:
                self._last_end = self._clock()
                self._idle.set()

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Mark serving calls while the block runs (a tuning job)."""
        self.watching = True
        try:
            yield
        finally:
            self.watching = False

    # ------------------------------------------------------------------ the JIT's side
    def wait_for_gap(self) -> int:
        """Return once no serving call is in flight and the last one ended ``settle_s`` ago.

        Gives up waiting after ``wait_limit_s`` (the model is served back to back). Returns
        a stamp for :meth:`came_since`.
        """
        if not self.watching:
            return self._last_start
        deadline = self._clock() + self.wait_limit_s
        while True:
            self._idle.clear()
            quiet = self._clock() - self._last_end
            if not self._in_flight and quiet >= self.settle_s:
                return self._last_start
            now = self._clock()
            if now >= deadline:
                return self._last_start
            if self._in_flight:
                self.waited.set()
                self._idle.wait(min(_SLICE_S, deadline - now))
            else:
                time.sleep(min(self.settle_s - quiet, deadline - now))

    def came_since(self, stamp: int) -> bool:
        """Whether a serving call started after :meth:`wait_for_gap` gave ``stamp``, or is in flight now."""
        return bool(self._in_flight) or self._last_start != stamp

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)


SERVING_CALLS = ServingCalls()
"""The process's serving calls: one model per process, as the JIT tunes one."""
