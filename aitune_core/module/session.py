"""Recording sessions: only the calls a tuning run makes itself are recorded.

``tune()`` gathers by running the user's function inside a session
(:func:`aitune_core.module.wrapper.recording_session`).
The session lives in a context variable, so it belongs to the thread (or async task)
that gathers: calls that other threads make to the same modules meanwhile are not
part of the tuning data and must not widen its graphs, and two threads tuning two
models each record only their own calls.

The number of open sessions is kept process-wide as well: a tuned module's routed
path does not look at the context variable on every call; opening a session raises
an alarm on every wrapper instead (see :mod:`aitune_core.module.staleness`), and only
alarmed calls ask which session they belong to.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar

_current: ContextVar[RecordingSession | None] = ContextVar("aitune_recording_session", default=None)
_lock = threading.Lock()
_open = 0


class RecordingSession:
    """One gathering run; wrapped modules record the calls made inside it."""

    __slots__ = ()


def current_session() -> RecordingSession | None:
    """The session this context records for, if any."""
    return _current.get()


def sessions_open() -> bool:
    """Whether any thread is gathering right now."""
    return _open > 0


@contextlib.contextmanager
def open_session(on_open: Callable[[], None] | None = None) -> Iterator[RecordingSession]:
    """Record the calls made in this context until the block ends.

    ``on_open`` runs after the session is counted as open, so that whatever it alarms
    sees the count when it next checks.
    """
    global _open
    session = RecordingSession()
    with _lock:
        _open += 1
    token = _current.set(session)
    try:
        if on_open is not None:
            on_open()
        yield session
    finally:
        _current.reset(token)
        with _lock:
            _open -= 1
