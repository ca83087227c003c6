"""The CPU time of every thread of this process, up to date: what a round's CPU share is made of.

``time.process_time()`` sums its threads' CPU time as the kernel last recorded it, and
the kernel records a thread running on another core only when it is switched out or at
a scheduler tick. A call of 3-5 ms, whose pool thread runs on the other core, is then
counted with that thread's time up to a tick late: on resnet18 at batch 1 and two
threads, the process share of quiet ONNX Runtime calls read anywhere from 1.0 to 2.0,
and flagged 89 of 150 as preempted, 19 of them slowed.

Each thread's own CPU clock is brought up to date when it is read, wherever the
thread runs. Summed over the threads, the same calls read 2.0-2.1 quiet, and 18 were
flagged, each one slowed. The calling thread's clock alone would miss a neighbour that
preempts a pool thread: the caller spins at the pool's barrier through it (68 of 163
slowed calls missed beside two bursty neighbours, against 33).

Reading every thread costs 8 us with 3 threads and 21 us with 16, outside the timed call.
Where the threads' clocks cannot be read (another OS), this is ``process_time``.
"""

from __future__ import annotations

import os
import time

from aitune_core.profiling.threads_of_process import TASKS, sum_over_threads

_PER_THREAD_SCHED_CLOCK = 6
"""Linux's clock id for a thread's scheduler CPU time is ``(~tid << 3) | 6`` (per-thread, sched)."""
_readable: bool | None = None


def _thread_clock(tid: int) -> int:
    return ((~tid) << 3) | _PER_THREAD_SCHED_CLOCK


def _threads_readable() -> bool:
    try:
        time.clock_gettime(_thread_clock(int(os.listdir(TASKS)[0])))
    except (OSError, ValueError, IndexError, OverflowError):
        return False
    return True


def process_cpu_s() -> float:
    """Seconds of CPU this process's live threads have used, each read from its own clock.

    A thread that ends between two reads takes its time with it, so callers take
    differences as at least zero.
    """
    global _readable
    if _readable is None:
        _readable = _threads_readable()
    if not _readable:
        return time.process_time()
    used = sum_over_threads(lambda thread: time.clock_gettime(_thread_clock(int(thread))))
    return time.process_time() if used is None else used
