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


def step_aside(pid: int = 0) -> str:
    """Lower process ``pid`` (0: this one) and what it starts from now on to background priority; says how.

    The subprocess executor applies it to a child as soon as it is started, so that the
    child's imports (torch: seconds of CPU) already run in the background, not only its build.
    """
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
            return "SCHED_IDLE"
        except OSError:
            pass
    with contextlib.suppress(OSError, AttributeError):
        if pid:
            os.setpriority(os.PRIO_PROCESS, pid, 19)
        else:
            os.nice(19 - os.nice(0))
        return "nice 19"
    return "unchanged"


def thread_limits(threads: int) -> dict[str, str]:
    """Environment for a child that may use ``threads`` cores: OpenMP and Inductor's compile pool alike."""
    return {"OMP_NUM_THREADS": str(threads), "TORCHINDUCTOR_COMPILE_THREADS": str(threads)}
