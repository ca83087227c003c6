"""Keeping serving calls and FX traces apart while the JIT compiles in this process.

An FX trace patches ``nn.Module.__call__`` process-wide for as long as it runs
(``torch.fx.Tracer.trace``), so a module called from another thread meanwhile is
taken for part of the trace: Inductor's own small traces made a serving call of a
conv net raise ``NameError: module is not installed as a submodule``. While a tuning
runs in this process, traces therefore wait for the model calls in flight to finish,
and model calls wait for a trace to end. make_fx's tracer, whose patched call only runs
the module (AOTAutograd's long traces), is left to run alongside.

The cost falls on serving only during tuning, and only for the length of those traces;
building in a child process (``executor="subprocess"``) avoids it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class TraceGate:
    """A readers-writer lock: model calls share it, leaf-tracing FX traces take it alone."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._calls = 0
        self._tracing = False
        self._users = 0
        self._original: Any = None
        self._mine = threading.local()
        self.active = False

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Around a model call: waits while a trace runs."""
        mine = self._mine
        with self._changed:
            self._changed.wait_for(lambda: not self._tracing)
            self._calls += 1
        mine.depth = getattr(mine, "depth", 0) + 1
        try:
            yield
        finally:
            mine.depth -= 1
            with self._changed:
                self._calls -= 1
                self._changed.notify_all()

    @contextlib.contextmanager
    def _alone(self) -> Iterator[None]:
        if getattr(self._mine, "depth", 0):  # a trace made inside a model call (a recompile) cannot wait for itself
            yield
            return
        with self._changed:
            self._changed.wait_for(lambda: not self._tracing and self._calls == 0)
            self._tracing = True
        try:
            yield
        finally:
            with self._changed:
                self._tracing = False
                self._changed.notify_all()

    @contextlib.contextmanager
    def guarding(self) -> Iterator[None]:
        """While the block runs (a tuning job), FX traces and model calls are kept apart."""
        self._install()
        try:
            yield
        finally:
            self._uninstall()

    def _install(self) -> None:
        with self._changed:
            self._users += 1
            if self._users > 1:
                return
            from torch.fx import Tracer
            from torch.fx.experimental.proxy_tensor import PythonKeyTracer

            original = Tracer.trace
            passes_through = PythonKeyTracer.call_module
            gate = self

            def trace(tracer: Any, *args: Any, **kwargs: Any) -> Any:
                if type(tracer).call_module is passes_through:
                    return original(tracer, *args, **kwargs)
                with gate._alone():
                    return original(tracer, *args, **kwargs)

            self._original = original
            Tracer.trace = trace  # type: ignore[method-assign,assignment]
            self.active = True

    def _uninstall(self) -> None:
        with self._changed:
            self._users -= 1
            if self._users or self._original is None:
                return
            from torch.fx import Tracer

            Tracer.trace = self._original  # type: ignore[method-assign]
            self._original = None
            self.active = False


TRACE_GATE = TraceGate()
