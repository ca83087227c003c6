"""A Ray task's candidate held to its memory limit, inside the worker process it shares with Ray.

A Ray worker runs candidates in its own process, so, unlike a subprocess child, it
cannot be killed when its candidate holds too much: :class:`MemoryWatch` raises
:class:`CandidateMemoryError` in the candidate's thread instead, so that the candidate
fails with a reason and the worker lives on. What counts is what the subprocess
executor counts (:func:`aitune_core.plugin_api.executors.held_bytes`): the anonymous resident
memory of the worker and of every helper it started.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Iterator

from aitune_core.plugin_api.executors import held_bytes, over_limit, with_descendants

CHECK_INTERVAL_S = 0.1
"""How often a watched candidate's memory is read; a fast allocator can overshoot by what it gains in that time."""


class CandidateMemoryError(MemoryError):
    """Raised in a worker's task thread when its candidate went over its memory limit."""

    reason = "over the memory limit"

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or (self.reason,)))


class MemoryWatch:
    """Stops the candidate running on this thread when this process and its helpers hold more than a limit.

    It raises :class:`CandidateMemoryError` only inside :meth:`armed`, where
    the candidate's own code runs. Python delivers that exception only between
    bytecodes; a candidate stuck in native code that is still over the limit
    ``grace_s`` later ends the process (``on_stuck``, by default its helpers are killed
    and the process exits with ``exit_code``).
    """

    def __init__(
        self,
        limit_bytes: int,
        exit_code: int,
        grace_s: float = 10.0,
        on_stuck: Callable[[int], None] | None = None,
        measure: Callable[[], int | None] | None = None,
    ) -> None:
        self.limit_bytes = limit_bytes
        self.exit_code = exit_code
        self.grace_s = grace_s
        self.on_stuck = on_stuck or self._end_process
        self._measure = measure or (lambda: held_bytes(with_descendants(os.getpid())))
        self._target = threading.get_ident()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="aitune-memory-watch", daemon=True)
        self._armed = False
        self.tripped_at: int | None = None

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """Where the exception may be raised: code of the candidate's, not its caller's."""
        with self._lock:
            self._armed = True
        try:
            yield
        finally:
            with self._lock:
                self._armed = False

    def __enter__(self) -> MemoryWatch:
        if self._measure() is not None:  # nothing to watch where memory cannot be read
            self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        with self._lock:  # no exception reaches the thread once the candidate is done
            self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            held = self._measure()
            if held is None or held <= self.limit_bytes:
                continue
            with self._lock:
                if self._stop.is_set():
                    return
                if not self._armed:
                    continue
                self.tripped_at = held
                _raise_in_thread(self._target, held, self.limit_bytes)
            if self._stop.wait(self.grace_s):
                return
            held = self._measure()
            if held is not None and held > self.limit_bytes:
                self.on_stuck(held)
            return

    def _end_process(self, held: int) -> None:
        import signal
        import sys

        print(
            f"aitune: out of memory: {over_limit(held, self.limit_bytes)}; ending this worker",
            file=sys.stderr,
            flush=True,
        )
        for pid in (with_descendants(os.getpid()) or [])[1:]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(self.exit_code)


def _raise_in_thread(thread_id: int, held: int, limit_bytes: int) -> None:
    """Raise a :class:`CandidateMemoryError` naming ``held`` in thread ``thread_id`` at its next bytecode."""
    error = type(CandidateMemoryError.__name__, (CandidateMemoryError,), {"reason": over_limit(held, limit_bytes)})
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(error))
