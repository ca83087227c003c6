"""The process-wide guard between builds and timings: nothing builds while candidates are timed.

Builds running side by side (in child processes, on a pool of threads waiting for
them) keep the machine's cores and memory bandwidth busy; a comparison timed then
would measure the builds as much as the candidates. So every build running for this
process holds the gate shared (:meth:`BuildGate.building`), and every timing holds it
alone (:meth:`BuildGate.profiling`): a timing waits for the builds already running to
end, and builds that would start meanwhile wait for it, so the two interleave and
never overlap. A timing that is waiting goes first, so a long queue of builds cannot
starve it.

Within one thread the gate is re-entrant both ways (a build that times, or a timing
that builds in this process, runs without waiting for itself). ``listeners`` hear each
start and end, for the progress line and for tests that check the interleaving.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

Listener = Callable[[str, str, str], None]
"""``(kind, "start" | "end", label)``, kind being ``"build"`` or ``"profile"``."""


class BuildGate:
    """Shared by builds, held alone by timings; see the module docstring."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._builds = 0
        self._profiling = False
        self._waiting = 0
        self._local = threading.local()
        self.listeners: list[Listener] = []

    @property
    def builds(self) -> int:
        """How many builds hold the gate now."""
        return self._builds

    def _held(self) -> bool:
        return bool(getattr(self._local, "depth", 0))

    def _tell(self, kind: str, event: str, label: str) -> None:
        for listener in list(self.listeners):
            listener(kind, event, label)

    @contextlib.contextmanager
    def building(self, label: str = "") -> Iterator[None]:
        """Hold the gate for one build; waits while a timing holds it or waits for it."""
        if self._held():
            yield
            return
        with self._condition:
            while self._profiling or self._waiting:
                self._condition.wait()
            self._builds += 1
            self._tell("build", "start", label)
        self._local.depth = 1
        try:
            yield
        finally:
            self._local.depth = 0
            with self._condition:
                self._builds -= 1
                self._tell("build", "end", label)
                self._condition.notify_all()

    @contextlib.contextmanager
    def profiling(self, label: str = "") -> Iterator[None]:
        """Hold the gate alone while timing: waits for the running builds and keeps new ones waiting."""
        if self._held():
            yield
            return
        with self._condition:
            self._waiting += 1
            try:
                while self._builds or self._profiling:
                    self._condition.wait()
            finally:
                self._waiting -= 1
            self._profiling = True
            self._tell("profile", "start", label)
        self._local.depth = 1
        try:
            yield
        finally:
            self._local.depth = 0
            with self._condition:
                self._profiling = False
                self._tell("profile", "end", label)
                self._condition.notify_all()


BUILD_GATE = BuildGate()
"""The gate of this process: every executor's builds and every strategy's timings go through it."""
