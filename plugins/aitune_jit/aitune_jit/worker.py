"""The background thread tuning runs in, so that no serving call waits on a compile.

Two things keep serving responsive while it works. Its CPU priority is lowered
(Linux: per thread, inherited by the compiler processes it starts), so serving gets the
cores first. And the interpreter's thread switch interval is shortened: a serving call
releases the GIL in every torch op and must get it back after each; with the default
5 ms interval and a tuning thread busy in Python (tracing a model), each op could wait
that long. Both are put back when the queue is empty.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable

from aitune_core.log import get_logger


class TuningWorker:
    """Runs submitted jobs one at a time, in submission order, on one daemon thread."""

    def __init__(self, nice: int = 10, switch_interval_s: float = 0.0) -> None:
        self._nice = nice
        self._switch_interval_s = switch_interval_s
        self._jobs: deque[Callable[[], None]] = deque()
        self._changed = threading.Condition()
        self._running = 0
        self._thread: threading.Thread | None = None
        self._stopped = False

    def submit(self, job: Callable[[], None]) -> None:
        with self._changed:
            if self._stopped:
                return
            self._jobs.append(job)
            self._changed.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="aitune-jit-tuning", daemon=True)
                self._thread.start()

    @property
    def busy(self) -> bool:
        return bool(self._jobs) or self._running > 0

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every job submitted has run; False when ``timeout`` came first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self.busy, timeout)

    def stop(self) -> None:
        """Run nothing more (the job running finishes)."""
        with self._changed:
            self._stopped = True
            self._jobs.clear()
            self._changed.notify_all()

    def _loop(self) -> None:
        _lower_priority(self._nice)
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._jobs) or self._stopped)
                if self._stopped and not self._jobs:
                    return
                job = self._jobs.popleft()
                self._running += 1
            previous = sys.getswitchinterval()
            if self._switch_interval_s:
                sys.setswitchinterval(min(previous, self._switch_interval_s))
            try:
                job()
            except BaseException as error:  # a job reports its own failures; this is the last resort
                get_logger().error("jit tuning job raised", error=f"{type(error).__name__}: {error}")
            finally:
                with self._changed:
                    self._running -= 1
                    if not self._jobs:
                        sys.setswitchinterval(previous)
                    self._changed.notify_all()


def _lower_priority(nice: int) -> None:
    if not nice or not hasattr(os, "setpriority"):
        return
    try:
        native = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, native, os.getpriority(os.PRIO_PROCESS, native) + nice)
    except OSError:
        pass
