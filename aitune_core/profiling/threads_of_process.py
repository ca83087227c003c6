"""This process's live threads, as Linux lists them: what per-thread readings are summed over.

Both signs of a disturbed round are per thread (:mod:`aitune_core.profiling.runqueue`,
:mod:`aitune_core.profiling.cpu_time`) and summed over the threads alive at the read.
"""

from __future__ import annotations

import os
from collections.abc import Callable

TASKS = "/proc/self/task"
"""One entry per live thread of this process, named by its thread id."""


def sum_over_threads(read: Callable[[str], float]) -> float | None:
    """``read(thread_id)`` summed over this process's live threads; None where they cannot be listed.

    A thread that ends between the listing and its read is left out (``read`` raises
    ``OSError``, ``ValueError`` or ``IndexError`` for it), so callers take differences
    as at least zero.
    """
    try:
        threads = os.listdir(TASKS)
    except OSError:
        return None
    total = 0.0
    for thread in threads:
        try:
            total += read(thread)
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
    return total
