"""``ait.jit.enable``, ``ait.jit.status``, ``ait.jit.wait`` and ``ait.jit.disable``: one JIT per process."""

from __future__ import annotations

import atexit
import threading
from typing import Any

from torch import nn

from aitune_jit.controller import JitRun
from aitune_jit.options import JitOptions
from aitune_jit.states import ModuleStatus

_run: JitRun | None = None
_lock = threading.Lock()


def enable(model: nn.Module | None = None, **options: Any) -> None:
    """Tune ``model`` (or the first model this process calls) in the background while it serves.

    model: the model to tune now; None waits for the first top-level call of a module in
        eval mode with parameters (what ``AITUNE_JIT=1`` does for a script that never
        imports aitune).
    options: see :class:`~aitune_jit.options.JitOptions`; ``AITUNE_JIT_<OPTION>``
        variables give the defaults (``AITUNE_JIT_DEPTH=1``, ``AITUNE_JIT_BACKENDS=inductor_jit``).
    Raises RuntimeError when a JIT run already has its model (``disable()`` first).
    """
    global _run
    run = JitRun(JitOptions.from_env(**options))
    with _lock:
        if _run is not None:
            if _run.model is not None:
                raise RuntimeError(
                    f"ait.jit is already tuning {type(_run.model).__name__}; "
                    "call ait.jit.disable() before enabling again"
                )
            _run.close()  # still waiting for a model: the new options replace the old
        _run = run
    _hook_exit()
    if model is not None:
        run.attach(model)
    else:
        run.watch_for_model()


def status() -> dict[str, ModuleStatus]:
    """Each module the JIT wraps, by name: recording, tuning, tuned or failed (with why). Empty until
    a model is found."""
    run = _run
    return run.status() if run is not None else {}


def wait(timeout: float | None = None) -> bool:
    """Block until no tuning is queued or running; False when ``timeout`` (seconds) came first."""
    run = _run
    return run.wait(timeout) if run is not None else True


def disable() -> None:
    """Stop the JIT: no more tuning, every wrapper taken off, modules as they were before."""
    global _run
    with _lock:
        run, _run = _run, None
    if run is not None:
        run.close()


def enabled() -> bool:
    return _run is not None


_exit_hooked = False


def _hook_exit() -> None:
    """Wait for tuning at exit, before the interpreter starts shutting threads down.

    Compilers start thread pools; once ``threading`` begins shutting down (its exit hooks
    and ``atexit`` handlers run after that) a pool can no longer be started and a compile
    still running fails. ``threading._shutdown`` is what the interpreter calls first when
    the main thread is done, so the wait runs just before it.
    """
    global _exit_hooked
    with _lock:
        if _exit_hooked:
            return
        _exit_hooked = True
    original = getattr(threading, "_shutdown", None)
    if original is None:  # another interpreter: a compile running at exit may then fail
        atexit.register(_finish)
        return

    def _shutdown() -> None:
        try:
            _finish()
        finally:
            original()

    threading._shutdown = _shutdown  # type: ignore[attr-defined]


def _finish() -> None:
    run = _run
    if run is not None:
        run.at_exit()
