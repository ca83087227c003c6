"""Logging through structlog, without taking over the application's own structlog setup.

aitune wraps its own logger rather than calling ``structlog.configure``, so that an
application that configures structlog keeps its configuration. Events go to stderr,
readable by people by default, or one JSON object per line with
``AITUNE_LOG_FORMAT=json``. ``AITUNE_LOG_LEVEL`` sets the level (default ``info``).

:func:`capture` collects event dicts in-process; tests and the tuning summary use it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator, MutableMapping
from typing import Any

from aitune_core.config import env_text

_listeners: list[list[dict[str, Any]]] = []
_lock = threading.Lock()
_logger: Any = None


def _to_listeners(_logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if _listeners:
        record = dict(event)
        record.setdefault("log_level", method)
        for sink in _listeners:
            sink.append(record)
    return event


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time of writing.

    The logger is built once; a stream bound then would outlive a later swap (pytest's
    capture, an application redirecting stderr) and end up writing to a closed file.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _level() -> int:
    name = (env_text("AITUNE_LOG_LEVEL") or "info").upper()
    value = logging.getLevelName(name)
    return value if isinstance(value, int) else logging.INFO


def json_output() -> bool:
    """Whether events are JSON objects, one a line (``AITUNE_LOG_FORMAT=json``), rather than text for people."""
    return env_text("AITUNE_LOG_FORMAT").lower() == "json"


def level_enabled(level: int) -> bool:
    """Whether events of ``level`` are shown (``AITUNE_LOG_LEVEL``)."""
    return level >= _level()


def _build() -> Any:
    import structlog  # imported on first log call, keeping `import aitune_core` light

    processors: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False),
        _to_listeners,
    ]
    if json_output():
        processors += [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), pad_event_to=0))
    return structlog.wrap_logger(
        structlog.PrintLogger(_CurrentStderr()),  # type: ignore[arg-type]
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_level()),
        cache_logger_on_first_use=False,
    )


def get_logger(**context: Any) -> Any:
    """A structlog logger bound to ``context`` (module, graph, backend, ...)."""
    global _logger
    if _logger is None:
        with _lock:
            if _logger is None:
                _logger = _build()
    return _logger.bind(**context) if context else _logger


def reset() -> None:
    """Re-read the environment (format and level) on next use."""
    global _logger
    _logger = None


@contextlib.contextmanager
def capture() -> Iterator[list[dict[str, Any]]]:
    """Collect every aitune event logged inside the block (at any enabled level)."""
    sink: list[dict[str, Any]] = []
    _listeners.append(sink)
    try:
        yield sink
    finally:
        _listeners.remove(sink)
