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
import signal
import threading


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


class BackgroundGroups:
    """The process groups of background builds running now, which a serving call may hold still while it runs.

    Background priority is not enough beside an OpenMP team that takes every core: the
    JIT's demo CNN served at two threads took 280 to 296 ms a call (2.6 ms without the
    build) while a build ran at ``SCHED_IDLE`` or at nice 19 (docs/benchmarks.md).
    A serving process that knows when its calls run (the JIT marks them) stops these
    groups with ``SIGSTOP`` for the length of a call and continues them after it. The
    groups stay in the serving process's session, so that when it dies while they are
    stopped they become orphaned, and the kernel sends their stopped members ``SIGHUP``
    and ``SIGCONT``: a build is never left stopped for good.
    """

    def __init__(self) -> None:
        self._groups: frozenset[int] = frozenset()  # replaced whole: readers never see a half-made set
        self._lock = threading.Lock()
        self._held = False

    def add(self, group: int) -> None:
        """Count ``group`` in; one started while the others are held is held at once, with them."""
        with self._lock:
            self._groups = self._groups | {group}
            if self._held:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGSTOP)

    def discard(self, group: int) -> None:
        """Forget ``group``; done before the group is killed and reaped, so its id is never signalled reused."""
        with self._lock:
            self._groups = self._groups - {group}

    def __bool__(self) -> bool:
        return bool(self._groups)

    def signal(self, signal_number: int) -> None:
        """Send ``signal_number`` to every group; a group that just ended is skipped."""
        if signal_number in (getattr(signal, "SIGSTOP", None), getattr(signal, "SIGCONT", None)):
            self._held = signal_number == signal.SIGSTOP
        for group in self._groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal_number)


BACKGROUND_GROUPS = BackgroundGroups()
"""The background builds of this process (children of a background subprocess executor)."""
