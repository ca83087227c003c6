"""JIT tuning: tune a model while it serves, with no change to its code.

``ait.jit.enable()`` (or ``AITUNE_JIT=1`` in the environment of a script that never
imports aitune) finds the model at its first call, records its first calls, tunes in
a background thread while calls go on eagerly, checks the winner against eager on live
calls, and swaps it in atomically. Results are stored under the cache, keyed by the
weights, and a restarted process is routed from its first call. ``ait.jit.status()``
says where each module is. See ``docs/jit.md``.

Nothing is imported until a name is used: the interpreter-start hook imports this
package in every process that has ``AITUNE_JIT`` set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aitune_core.lazy_exports import lazy_exports as _lazy_exports

_EXPORTS: dict[str, str] = {
    "disable": "aitune_jit.api",
    "enable": "aitune_jit.api",
    "enabled": "aitune_jit.api",
    "status": "aitune_jit.api",
    "wait": "aitune_jit.api",
    "JitOptions": "aitune_jit.options",
    "JitState": "aitune_jit.states",
    "ModuleStatus": "aitune_jit.states",
}

__all__ = ["JitOptions", "JitState", "ModuleStatus", "disable", "enable", "enabled", "status", "wait"]

_export, __dir__ = _lazy_exports(globals(), _EXPORTS, lambda name: f"module 'aitune_jit' has no attribute {name!r}")


def __getattr__(name: str) -> Any:
    return _export(name)


if TYPE_CHECKING:
    from aitune_jit.api import disable, enable, enabled, status, wait
    from aitune_jit.options import JitOptions
    from aitune_jit.states import JitState, ModuleStatus
