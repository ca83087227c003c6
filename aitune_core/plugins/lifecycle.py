"""Running a backend lifecycle step with the plugins' observers and wrappers around it.

Order: ``aitune_before_step``, then the ``aitune_wrap_step`` wrappers around the step
itself, then ``aitune_after_step`` with the duration and the error (also on failure).
Without any lifecycle hook the step runs directly, so the common case pays nothing.

Plugins are called one by one, in distribution order, and the first one's wrapper is
outermost. A plugin whose hook raises is disabled (see ``PluginRegistry.disable``) and
the step goes on without it: a broken progress bar must not fail a build, and with it
``tune()`` and its eager fallback. The step's own outcome is never changed by a plugin:
its error always propagates, and only its error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pluggy

    from aitune_core.plugins.registry import PluginRegistry

_WRAP = "aitune_wrap_step"


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
        run = action
        for plugin_id, caller in reversed(registry.plugin_callers(_WRAP)):
            run = _wrapped(registry, plugin_id, caller, run, arguments)
        run()
    except BaseException as raised:
        error = raised
        raise
    finally:
        registry.each_result("aitune_after_step", **arguments, duration_s=time.perf_counter() - start, error=error)


def _wrapped(
    registry: PluginRegistry,
    plugin_id: str,
    caller: pluggy.HookCaller,
    inner: Callable[[], None],
    arguments: dict[str, Any],
) -> Callable[[], None]:
    """``inner`` inside one plugin's wrappers; a wrapper that fails is dropped, never the step.

    What ``inner`` did is watched, so that an exception coming out of the wrapper can be
    told apart: the step's own error passes through; anything else is the plugin's fault.
    """

    def run() -> None:
        ran = False
        error: BaseException | None = None

        def step() -> None:
            nonlocal ran, error
            ran = True
            try:
                inner()
            except BaseException as raised:
                error = raised
                raise

        try:
            caller.call_extra([step], arguments)
        except KeyboardInterrupt:
            raise
        except BaseException as raised:
            if raised is error:
                raise
            registry.disable(plugin_id, _WRAP, raised)
            if not ran:
                inner()  # the wrapper failed before the step: run it without that plugin
        if error is not None:
            raise error  # the step failed, whatever the wrapper raised or swallowed

    return run
