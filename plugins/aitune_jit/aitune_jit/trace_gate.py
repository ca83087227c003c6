"""Keeping FX traces out of serving calls while the JIT compiles in this process.

An FX trace patches ``nn.Module.__call__`` (and ``__getattr__``, and some globals)
process-wide for as long as it runs (``torch.fx.Tracer.trace``), so a module called
from another thread meanwhile is taken for part of the trace: Inductor's own small
traces made a serving call of a conv net raise ``NameError: module is not installed as
a submodule``.

While a tuning runs, every patch an FX trace makes is therefore scoped to the thread
that made it: the patched function checks the thread and hands any other thread's call
to what it replaced. Serving calls then run alongside traces, never waiting for them.
Where torch's patcher is not the one this was written against, the fallback keeps
traces and model calls apart instead: traces wait for the model calls in flight to
finish, and model calls wait for a trace to end (make_fx's tracer, whose patched call
only runs the module, is left to run alongside). That costs serving calls the length
of a trace, only while tuning runs.
"""

from __future__ import annotations

import builtins
import contextlib
import threading
from collections.abc import Callable, Iterator
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
        self._scoped: Callable[[], None] | None = None
        """Undoes the thread scoping of FX patches, while it is installed."""
        self.active = False
        """Whether model calls must pass :meth:`serving` (the fallback only)."""

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
            if _scope_patches_to_threads(self):
                return  # serving calls never wait: ``active`` stays False
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
            if self._users or (self._original is None and self._scoped is None):
                return
            if self._scoped is not None:
                self._scoped()
                self._scoped = None
                return
            from torch.fx import Tracer

            Tracer.trace = self._original  # type: ignore[method-assign]
            self._original = None
            self.active = False


def _scope_patches_to_threads(gate: TraceGate) -> bool:
    """Make every FX patch apply to the patching thread only; False where torch's patcher is not as expected."""
    try:
        from torch.fx._symbolic_trace import _Patcher
    except ImportError:
        return False
    patch_method, patch = getattr(_Patcher, "patch_method", None), getattr(_Patcher, "patch", None)
    if not callable(patch_method) or not callable(patch):
        return False

    def scoped_method(self: Any, cls: type, name: str, new_fn: Any, deduplicate: bool = True) -> None:
        return patch_method(self, cls, name, _for_this_thread(new_fn, getattr(cls, name, None)), deduplicate)

    def scoped(self: Any, frame_dict: dict[str, Any], name: str, new_fn: Any, deduplicate: bool = True) -> None:
        replaced = frame_dict[name] if name in frame_dict else getattr(builtins, name, None)
        return patch(self, frame_dict, name, _for_this_thread(new_fn, replaced), deduplicate)

    _Patcher.patch_method = scoped_method  # type: ignore[method-assign]
    _Patcher.patch = scoped  # type: ignore[method-assign]

    def undo() -> None:
        _Patcher.patch_method = patch_method  # type: ignore[method-assign]
        _Patcher.patch = patch  # type: ignore[method-assign]

    gate._scoped = undo
    return True


def _for_this_thread(new_fn: Any, replaced: Any) -> Any:
    """``new_fn`` for calls from this thread; ``replaced`` for any other's."""
    if replaced is None or getattr(replaced, "__fx_already_patched", False):
        return new_fn  # the patcher will skip it, or there is nothing to hand other threads
    owner = threading.get_ident()

    def patched(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == owner:
            return new_fn(*args, **kwargs)
        return replaced(*args, **kwargs)

    return patched


TRACE_GATE = TraceGate()
