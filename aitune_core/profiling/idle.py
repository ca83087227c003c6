"""Waiting, between two variants' rounds, for the last one's thread pools to go to sleep.

A runtime's pool keeps spinning for a while after its call returns, waiting for more
work: ONNX Runtime's held a whole core for about 30 ms at two threads (before
``session.force_spinning_stop``), OpenVINO's and OpenMP's for less. Timed next, in
the same process, another variant then runs on fewer cores than it will have when it
serves alone, and the variant that spins looks faster than it is: ONNX Runtime measured
about 2x eager while tuning and served at eager's speed. A deployment calls one backend
per route, with the other runtimes' pools asleep, so each variant's round starts once
the process is idle again: its own CPU time no longer runs on while it sleeps.

Neighbours do not lengthen the wait: their CPU time is not this process's.

The CPU time looked at is every thread's own clock (:mod:`~aitune_core.profiling.cpu_time`).
The process clock counts a thread on another core only up to its last scheduler tick,
so a 0.5 ms slice mostly read a spinning pool as idle: on resnet18 at two threads, the
rounds after AOT Inductor's or eager's then ran beside torch's spinning OpenMP threads.
ONNX Runtime measured 3.0-5.4 ms at batch 1 depending on which variant came before it
(2.6-2.9 ms with the wait working), and 2-24 of every comparison's rounds were retaken.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aitune_core.profiling.cpu_time import process_cpu_s

SLICE_S = 0.0005
"""How long each look sleeps: short against a round, long enough to see a spinning thread."""
IDLE_SHARE = 0.2
"""The process is idle when it used less than this share of a core while the caller slept."""
LIMIT_S = 0.1
"""The longest wait: a pool that never sleeps (a background thread of the user's) is not waited out."""


def wait_until_idle(
    cpu: Callable[[], float] = process_cpu_s,
    wall: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    limit_s: float = LIMIT_S,
) -> float:
    """Sleep in short slices until one shows this process idle; the seconds waited."""
    start = wall()
    while True:
        used, tick = cpu(), wall()
        sleep(SLICE_S)
        elapsed = wall() - tick
        if elapsed > 0 and (cpu() - used) / elapsed < IDLE_SHARE:
            return wall() - start
        if wall() - start >= limit_s:
            return wall() - start
