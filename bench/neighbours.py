"""CPU neighbours that the bench starts itself: each busy for a while, then idle, as on a shared machine.

Selection that holds on a quiet machine can fail where users tune: a CI runner, a node
with other pods, a laptop with a browser. Every bench that decides on timings runs
twice, once quiet and once beside these (``AITUNE_BENCH_LOAD=1``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

BUSY_S = (0.05, 0.4)
IDLE_S = (0.05, 0.4)
COUNT = 2

_LOOP = """
import os, random, sys, time
rng = random.Random(int(sys.argv[1]))
parent = int(sys.argv[2])
while os.getppid() == parent:  # a bench killed before its cleanup leaves no neighbour behind
    end = time.perf_counter() + rng.uniform({busy})
    while time.perf_counter() < end:
        pass
    time.sleep(rng.uniform({idle}))
"""


def load_wanted() -> bool:
    """Whether this bench run should tune beside bursty neighbours (``AITUNE_BENCH_LOAD=1``)."""
    return os.environ.get("AITUNE_BENCH_LOAD", "").strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def bursty_neighbours(count: int = COUNT, seed: int = 0) -> Iterator[list[int]]:
    """Run ``count`` processes that alternate busy and idle (see BUSY_S, IDLE_S) until the block ends; their pids."""
    code = _LOOP.format(busy=f"{BUSY_S[0]}, {BUSY_S[1]}", idle=f"{IDLE_S[0]}, {IDLE_S[1]}")
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(seed * 100 + index), str(os.getpid())], stdin=subprocess.DEVNULL
        )
        for index in range(count)
    ]
    try:
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()
