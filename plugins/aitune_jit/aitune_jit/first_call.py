"""Finding the model: ``nn.Module.__call__`` is patched until a model's first top-level call.

A script that never names aitune gives the JIT no model. The model is the first
module called from outside any other module's call that has parameters and is in
eval mode; calls nested in others (its layers) are not candidates. The patch is
removed the moment the model is found, before its call runs, so from then on module
calls cost exactly what they cost without aitune. A process whose top-level calls never
qualify (training, say) stops looking after :data:`GIVE_UP_AFTER` of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from torch import nn

from aitune_core.log import get_logger
from aitune_core.module.wrapper import Module

GIVE_UP_AFTER = 10_000
"""Top-level calls that did not qualify before the patch is removed for good."""


def qualifies(module: nn.Module) -> bool:
    """Whether ``module`` can be the model the JIT tunes."""
    if isinstance(module, Module) or module.training:
        return False
    return next(iter(module.parameters()), None) is not None


class FirstCallWatch:
    """Patches ``nn.Module.__call__`` until ``on_model`` accepts a top-level call's module."""

    def __init__(self, on_model: Callable[[nn.Module], None], give_up_after: int = GIVE_UP_AFTER) -> None:
        self._on_model = on_model
        self._give_up_after = give_up_after
        self._passed = 0
        self._local = threading.local()
        self._lock = threading.Lock()
        self._original: Any = None

    @property
    def installed(self) -> bool:
        return self._original is not None

    def install(self) -> None:
        with self._lock:
            if self._original is not None:
                return
            original = nn.Module.__call__
            self._original = original
            local = self._local
            watch = self

            def __call__(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
                depth = getattr(local, "depth", 0)
                if depth == 0 and watch._top_level(module):
                    return type(module).__call__(module, *args, **kwargs)  # routed now, if it was taken
                local.depth = depth + 1
                try:
                    return original(module, *args, **kwargs)
                finally:
                    local.depth = depth

            nn.Module.__call__ = __call__  # type: ignore[method-assign]

    def remove(self) -> None:
        with self._lock:
            if self._original is not None:
                nn.Module.__call__ = self._original  # type: ignore[method-assign]
                self._original = None

    def _top_level(self, module: nn.Module) -> bool:
        """Take ``module`` as the model if it qualifies; True when the patch is gone and the call must be redone."""
        if not qualifies(module):
            self._passed += 1
            if self._passed >= self._give_up_after:
                self.remove()
                get_logger().info(
                    "jit: no model found",
                    hint=f"{self._give_up_after} top-level module calls, none in eval mode with parameters; "
                    "call model.eval() before serving, or ait.jit.enable(model)",
                )
                return True
            return False
        with self._lock:
            if self._original is None:
                return True  # another thread took its model meanwhile
            nn.Module.__call__ = self._original  # type: ignore[method-assign]
            self._original = None
        try:
            self._on_model(module)
        except Exception as error:  # the user's call goes on, untuned, whatever went wrong here
            get_logger().error("jit: could not attach to the model", error=f"{type(error).__name__}: {error}")
        return True
