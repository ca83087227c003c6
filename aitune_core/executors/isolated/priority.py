"""Running a worker in the background: it gets a CPU only when nothing else in the system wants one.

Background tuning (the JIT) builds beside a process that is serving. On a small machine
a compile in a child at normal priority takes the cores a serving call wakes up for,
and the call waits behind it. Linux's ``SCHED_IDLE`` policy runs a process only when
no normal process is runnable, and it is inherited by every thread and process the
worker starts (compiler workers, ``gcc``), so the whole build steps aside. Where the
policy is missing, the lowest niceness is the next best thing.
"""

from __future__ import annotations

import contextlib
import os


def step_aside() -> str:
    """Lower this process (and what it starts from now on) to background priority; says which was applied."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return "SCHED_IDLE"
        except OSError:
            pass
    with contextlib.suppress(OSError, AttributeError):
        os.nice(19 - os.nice(0))
        return "nice 19"
    return "unchanged"


def thread_limits(threads: int) -> dict[str, str]:
    """Environment for a child that may use ``threads`` cores: OpenMP and Inductor's compile pool alike."""
    return {"OMP_NUM_THREADS": str(threads), "TORCHINDUCTOR_COMPILE_THREADS": str(threads)}
