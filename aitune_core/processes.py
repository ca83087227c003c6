"""Whether a process still runs: the one test behind every "is its owner gone?" decision.

Staging folders, store entries being written and Ray workers' scratch folders all carry
the pid of the process that made them, and are removed only once that process is gone.
The answer errs toward "alive": removing what a live process still writes corrupts its
work, while keeping a dead one's leftovers costs only disk until the next sweep.
"""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True unless ``pid`` is surely not a running process (ours counts as running)."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False  # 0 and negatives name process groups, never one process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by another user
    except OSError:
        return True  # cannot tell (e.g. no signals on this system): keep what it owns
    return True
