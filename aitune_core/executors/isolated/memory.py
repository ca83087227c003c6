"""How much memory a candidate may hold outside this process, and how much it holds.

The limit counts what a candidate really holds: the anonymous resident memory (heap,
tensors, compiler state) of its process and of every helper it started, such as
Inductor's compile workers. An address-space limit (``RLIMIT_AS``) would count
reservations instead: a CUDA context reserves tens of GiB it never touches and glibc
reserves 64 MiB per thread arena, so any limit tight enough to matter fails healthy
candidates. File-backed pages (shared libraries, mapped packages) are left out: the
kernel can drop them, and every compile worker maps the same torch libraries, which
would otherwise be charged once per worker.

Readings come from ``/proc``, so limits are enforced on Linux only; elsewhere
:func:`held_bytes` answers None and callers run without one. Device (CUDA) memory is
not counted: the CUDA allocator already fails cleanly when a GPU is full.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

MEMORY_SHARE = 0.5
"""Part of this machine's memory that the candidates running at once may hold together.

The rest is left to the tuning process, which holds the model and its samples too, and
to the system, so that a greedy candidate is stopped by its limit before the kernel's
out-of-memory killer has to pick a process (it may pick the tuning process itself).
"""

CHECK_INTERVAL_S = 0.1
"""How often a watched candidate's memory is read; a fast allocator can overshoot by what it gains in that time."""

_PROC = Path("/proc")
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
_NO_CGROUP_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a huge number, v2 as "max"


def machine_memory_bytes() -> int | None:
    """Memory this process may use: the machine's RAM, or its container's limit when that is lower."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < _NO_CGROUP_LIMIT:
            total = min(total, int(text))
    return total


def default_limit_mb(workers: int = 1) -> int | None:
    """:data:`MEMORY_SHARE` of :func:`machine_memory_bytes`, shared out among ``workers`` candidates at once."""
    total = machine_memory_bytes()
    if total is None:
        return None
    return max(1, int(total * MEMORY_SHARE / max(1, workers)) // 2**20)


def _process_table() -> dict[int, tuple[int, int]] | None:
    """``{pid: (parent pid, process group)}`` of every process, or None without ``/proc``."""
    if not (_PROC / "self" / "stat").is_file():
        return None
    # Read ten times a second, in the process that may be serving (the JIT's): plain os calls,
    # not pathlib, cost less than half the CPU (about 1 ms for 100 processes against 2.5 ms).
    table = {}
    root = str(_PROC)
    for entry in os.listdir(root):
        if not entry.isdigit():
            continue
        try:
            handle = os.open(f"{root}/{entry}/stat", os.O_RDONLY)
            try:
                stat = os.read(handle, 4096)
            finally:
                os.close(handle)
        except OSError:
            continue  # it ended while the table was read
        # "pid (command) state ppid pgrp ...": the command may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), int(fields[2]))
    return table


def group_members(group: int) -> list[int] | None:
    """Processes of process group ``group``, helpers that outlived their parent included; None without ``/proc``."""
    table = _process_table()
    return None if table is None else [pid for pid, (_, pgrp) in table.items() if pgrp == group]


def with_descendants(pid: int) -> list[int] | None:
    """``pid`` and every process it started, directly or not; None without ``/proc``."""
    table = _process_table()
    if table is None:
        return None
    found, frontier = [pid], {pid}
    while frontier:
        frontier = {child for child, (parent, _) in table.items() if parent in frontier} - set(found)
        found.extend(sorted(frontier))
    return found


def held_bytes(pids: Iterable[int] | None) -> int | None:
    """Anonymous resident memory of ``pids`` together; None when it cannot be read here."""
    if pids is None:
        return None
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            fields = (_PROC / str(pid) / "statm").read_bytes().split()
        except OSError:
            continue  # it ended
        total += (int(fields[1]) - int(fields[2])) * page  # resident minus file-backed and shared
    return total


def over_limit(held: int, limit_bytes: int) -> str:
    """What a candidate stopped at its memory limit held, for its row's reason."""
    return f"held {held / 2**20:.0f} MiB, over the limit of {limit_bytes / 2**20:.0f} MiB"
