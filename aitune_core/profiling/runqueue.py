"""How long this process's threads waited for a CPU: the direct sign that a neighbour held it.

A neighbour that takes a core shows in how long this process's runnable threads wait
in the run queue, which Linux keeps per thread (``/proc/self/task/<tid>/schedstat``,
nanoseconds). At one thread the CPU share of a round shows a preemption as well
(:mod:`aitune_core.profiling.interference`), but with a thread pool it does not: the
pool's other threads spin at their barrier while one of them waits for a core, so
the process keeps most of its CPU time while its call takes twice as long. On resnet18
at two threads beside two bursty neighbours, the CPU share missed 45 of 214 slowed
calls; the run-queue wait missed 2.

Where the kernel keeps no such numbers (another OS, schedstats off), this says None and
interference is judged from the CPU share alone.
"""

from __future__ import annotations

from aitune_core.profiling.threads_of_process import TASKS, sum_over_threads

_available: bool | None = None


def _schedstat_works() -> bool:
    """Whether the kernel counts run time here at all: a kernel without schedstats reports zeros."""
    try:
        with open("/proc/self/schedstat", "rb") as file:
            return int(file.read().split()[0]) > 0
    except (OSError, ValueError, IndexError):
        return False


def runqueue_wait_s() -> float | None:
    """Seconds this process's live threads have spent runnable but not running, in all; None where unknown.

    A thread that ends between two reads takes its share with it, so callers take
    differences as at least zero.
    """
    global _available
    if _available is None:
        _available = _schedstat_works()
    if not _available:
        return None
    waited_ns = sum_over_threads(_waited_ns)
    return None if waited_ns is None else waited_ns / 1e9


def _waited_ns(thread: str) -> int:
    with open(f"{TASKS}/{thread}/schedstat", "rb") as file:
        return int(file.read().split()[1])
