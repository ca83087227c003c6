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

Builds in child processes run at background priority, which an OpenMP team that takes
every core does not survive: the demo CNN's serving calls at batch 4 and two threads (2.6
ms) took 280 to 296 ms while a build ran beside them, at ``SCHED_IDLE`` and at nice 19
alike, and never while it was held. So when the serving threads take every core
the process may use (:func:`team_takes_every_core`, torch's default), the first serving
call in flight also holds the background builds still
(:data:`~aitune_core.executors.isolated.priority.BACKGROUND_GROUPS`) until it ends,
unless that would leave them less than :data:`BUILD_SHARE` of each second: a model served
back to back still gets tuned. With a core to spare (one thread of two), the build runs
there and holding it would only slow the tuning down.

Marking costs two list operations and an event per call, and two signals while a build
runs, and only while a tuning job runs: a tuned model's calls check one flag. A call holds
the builds even when none runs yet, so that the first build, started by the JIT while
the call runs, is held at once instead of running beside it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from aitune_core.executors.build_slots import usable_cores
from aitune_core.executors.isolated.priority import BACKGROUND_GROUPS, BackgroundGroups

SETTLE_S = 0.002
"""Quiet time after a serving call before the JIT starts work: its thread pools stop spinning meanwhile."""
WAIT_LIMIT_S = 0.05
"""The longest the JIT waits for a gap: a model served back to back still gets tuned, one piece at a time."""
_SLICE_S = 0.005
"""How long one wait for a serving call to end lasts before the calls in flight are looked at again."""
BUILD_SHARE = 0.1
"""The least share of each :data:`HOLD_WINDOW_S` that background builds run while calls come back to back."""
HOLD_WINDOW_S = 1.0
"""The span over which holds are counted: one slow held call (a stall) must not end holding for good."""
_CAN_HOLD = hasattr(signal, "SIGSTOP") and hasattr(os, "killpg")


def team_takes_every_core() -> bool:
    """Whether a serving call's intra-op threads take every core this process may run on."""
    return torch.get_num_threads() >= usable_cores()


class ServingCalls:
    """Serving calls in flight (marked by the serving threads) and the gaps between them (waited for by the JIT)."""

    def __init__(
        self,
        settle_s: float = SETTLE_S,
        wait_limit_s: float = WAIT_LIMIT_S,
        clock: Callable[[], float] = time.perf_counter,
        builds: BackgroundGroups = BACKGROUND_GROUPS,
        holds_builds: Callable[[], bool] = team_takes_every_core,
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
        self._builds = builds
        self._holds_builds = holds_builds
        self._holding = False  # decided when a tuning job starts, at the threads it serves at
        self._window_start = -math.inf
        self._held_in_window = 0.0  # seconds the builds were held since the window started
        self._held_at = 0.0

    # ------------------------------------------------------------------ the serving side
    def serve(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``call(*args, **kwargs)``, marked in flight while it runs."""
        in_flight = self._in_flight
        # Held even with no build running yet: one the JIT starts during this call is held at once.
        held = self._holding and not in_flight and self._hold_builds()
        in_flight.append(None)
        self._last_start = next(self._starts)
        try:
            return call(*args, **kwargs)
        finally:
            in_flight.pop()
            if held:
                self._release_builds()
            if not in_flight:
                self._last_end = self._clock()
                self._idle.set()

    def _hold_builds(self) -> bool:
        """Stop the background builds for a call, unless they were held for all but their share of this window."""
        now = self._clock()
        if now - self._window_start >= HOLD_WINDOW_S:
            self._window_start, self._held_in_window = now, 0.0
        if self._held_in_window >= (1 - BUILD_SHARE) * HOLD_WINDOW_S:
            return False
        self._held_at = now
        self._builds.signal(signal.SIGSTOP)
        return True

    def _release_builds(self) -> None:
        self._builds.signal(signal.SIGCONT)
        if self._builds:  # a hold with nothing to hold took no time from the builds
            self._held_in_window += self._clock() - self._held_at

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Mark serving calls while the block runs (a tuning job)."""
        self._holding = _CAN_HOLD and self._holds_builds()
        self.watching = True
        try:
            yield
        finally:
            self.watching = self._holding = False

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
