"""The whole tune's profiling time, capped and stated up front.

Each comparison measures until its verdicts are clear, not for a number of seconds: on
a busy machine or with a slow model, a fixed time buys too few rounds exactly where
more are needed. What bounds it instead is one cap for the whole ``tune()``: each
comparison draws from it, and once it is spent, comparisons stop as soon as they
have the fewest rounds that can give an interval. ``tune()`` states the cap before it
starts and every comparison's progress line shows what is left.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

import attrs


@attrs.define
class ProfilingBudget:
    """Seconds of profiling one ``tune()`` may spend in all, and what it has spent."""

    cap_s: float
    spent_s: float = 0.0
    capped: int = 0
    """Comparisons that stopped early because the cap was spent."""
    _lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)

    def charge(self, seconds: float) -> None:
        with self._lock:
            self.spent_s += seconds

    def note_capped(self) -> None:
        with self._lock:
            self.capped += 1

    @property
    def exhausted(self) -> bool:
        return self.spent_s >= self.cap_s

    def describe(self) -> str:
        return f"{self.spent_s:.1f} of {self.cap_s:.0f} s"


_CURRENT: contextvars.ContextVar[ProfilingBudget | None] = contextvars.ContextVar("aitune_profiling", default=None)


def current_budget() -> ProfilingBudget | None:
    """The budget of the ``tune()`` running in this context; None outside one (no cap)."""
    return _CURRENT.get()


@contextlib.contextmanager
def profiling_budget(cap_s: float) -> Iterator[ProfilingBudget]:
    """Run a ``tune()`` under a cap of ``cap_s`` seconds of profiling; nested tunes share the outer one."""
    outer = _CURRENT.get()
    if outer is not None:
        yield outer
        return
    budget = ProfilingBudget(cap_s)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)
