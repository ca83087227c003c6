"""Running a backend lifecycle step with the plugins' observers and wrappers around it.

Order: ``aitune_before_step``, then the ``aitune_wrap_step`` wrappers around the step
itself, then ``aitune_after_step`` with the duration and the error (also on failure).
Without any lifecycle hook the step runs directly, so the common case pays nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def run_step(step: str, backend: Any, action: Callable[[], None]) -> None:
    from aitune_core.plugins.manager import current_registry

    registry = current_registry()
    if not registry.observes_lifecycle:
        action()
        return
    hook = registry.hook
    hook.aitune_before_step(step=step, backend=backend)
    error: BaseException | None = None
    start = time.perf_counter()
    try:
        hook.aitune_wrap_step.call_extra([lambda: action()], {"step": step, "backend": backend})
    except BaseException as raised:
        error = raised
        raise
    finally:
        hook.aitune_after_step(step=step, backend=backend, duration_s=time.perf_counter() - start, error=error)
