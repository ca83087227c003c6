"""How many candidates this machine builds at once: from its cores and memory, or the user's setting.

A build keeps about two cores busy (an Inductor compile: Python tracing and lowering
on one, its pool of C++ compiler workers on the rest; on resnet18, two builds side by
side on two cores took as long as one after another), and holds the module, its export
and the compiler's state in memory. Running several side by side pays off only when
each gets its cores and the machine's memory holds them all; otherwise they slow each
other down or run out of memory. So the number is the smaller of the cores per build
and what half of the memory holds at :data:`MEMORY_PER_BUILD_BYTES` each (the other
half stays for the tuning process and the user), capped at
:data:`MAX_PARALLEL_BUILDS`. A machine with fewer than four cores builds in this
process, one after another, as tuning always did.
"""

from __future__ import annotations

import os

import attrs

from aitune_core.executors.isolated.memory import MEMORY_SHARE, machine_memory_bytes

CORES_PER_BUILD = 2
"""The cores one build keeps busy: a two-core machine builds one at a time (see docs/benchmarks.md, "Tuning time")."""

MEMORY_PER_BUILD_BYTES = 2 * 2**30
"""What one build of a model of up to a few hundred MB holds at its peak, with the compiler's state."""

MAX_PARALLEL_BUILDS = 8
"""Past this, builds wait on the disk and on the tuning process more than on cores."""


@attrs.frozen
class Machine:
    """What decides the number of parallel builds: usable cores, and memory (None: unknown)."""

    cores: int
    memory_bytes: int | None


def usable_cores() -> int:
    """The cores this process may run on: its affinity, not the whole machine's."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cores = os.cpu_count() or 1
    return max(1, cores)


def this_machine() -> Machine:
    """The cores this process may run on (:func:`usable_cores`) and its memory."""
    return Machine(usable_cores(), machine_memory_bytes())


def parallel_builds(machine: Machine, setting: int | None = None) -> int:
    """How many candidates to build at once: ``setting`` when given (``config.parallel_builds``), else chosen."""
    if setting is not None:
        return setting
    by_cores = machine.cores // CORES_PER_BUILD
    by_memory = by_cores
    if machine.memory_bytes is not None:
        by_memory = int(machine.memory_bytes * MEMORY_SHARE) // MEMORY_PER_BUILD_BYTES
    return max(1, min(by_cores, by_memory, MAX_PARALLEL_BUILDS))


def threads_per_build(machine: Machine, builds: int) -> int:
    """The torch (and compiler) threads of each of ``builds`` children: the cores shared out."""
    return max(1, machine.cores // max(1, builds))
