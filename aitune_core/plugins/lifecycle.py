"""Running a backend lifecycle step with the plugins' observers and wrappers around it.

Order: ``aitune_before_step``, then the ``aitune_wrap_step`` wrappers around the step
itself, then ``aitune_after_step`` with the duration and the error (also on failure).
Without any lifecycle hook the step runs directly, so the common case pays nothing.

Each is one call through pluggy, so wrappers nest as pluggy orders them. The step runs
inside the wrappers as an extra implementation of ``aitune_wrap_step``, through pluggy's
``HookCaller.call_extra``, which pluggy documents for calling a hook with functions that
are not registered. A plugin whose hook raises is disabled by its guard and the step
goes on without it (:mod:`aitune_core.plugins.containment`): a broken progress bar must
not fail a build, and with it ``tune()`` and its eager fallback. The step's own outcome
is never changed by a plugin: its error always propagates, even past a wrapper that
swallows it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aitune_core.plugins.registry import PluginRegistry


def run_step(registry: PluginRegistry, step: str, backend: Any, action: Callable[[], None]) -> None:
    """What ``extensions.slots().run_step`` runs once ``registry`` is installed."""
    if not registry.observes_lifecycle:
        action()
        return
    arguments: dict[str, Any] = {"step": step, "backend": backend}
    registry.each_result("aitune_before_step", **arguments)
    error: BaseException | None = None
    start = time.perf_counter()
    try:
        _wrapped(registry, arguments, action)
    except BaseException as raised:
        error = raised
        raise
    finally:
        registry.each_result("aitune_after_step", **arguments, duration_s=time.perf_counter() - start, error=error)


def _wrapped(registry: PluginRegistry, arguments: dict[str, Any], action: Callable[[], None]) -> None:
    """``action`` inside every plugin's ``aitune_wrap_step`` wrapper, in one pluggy call."""
    failed: list[BaseException] = []

    def step() -> None:
        try:
            action()
        except BaseException as raised:
            failed.append(raised)
            raise

    registry.hook.aitune_wrap_step.call_extra([step], arguments)
    if failed:
        raise failed[0]  # the step failed, and a wrapper swallowed its error
