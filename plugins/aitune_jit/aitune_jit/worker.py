"""The background thread tuning runs in, so that no serving call waits on a compile.

Its work in this process (restoring candidates, validating and timing them) starts in
the gaps between serving calls (:mod:`aitune_jit.pacing`). The interpreter's thread
switch interval is shortened while it works: a serving call releases the GIL in every
torch op and must get it back after each; with the default 5 ms interval and a tuning
thread busy in Python (tracing a model), each op could wait that long. It is put back
when the queue is empty.

Its CPU priority is left as serving's by default (``nice=0``), for two reasons. The
thread holds the GIL: at a lower priority it can be descheduled while holding it, and
a serving call waiting for the GIL then waits until every thread preferred to it has
had its slice. And thread pools made in this thread inherit its priority and keep it
when they serve: the intra-op threads of an ONNX Runtime session restored here for the
winner served at nice 10. Compiles run in a child process at background priority
instead (:mod:`aitune_jit.placement`).
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

    def __init__(self, nice: int = 0, switch_interval_s: float = 0.0) -> None:
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
