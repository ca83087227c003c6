"""The process-wide plugin registry, loaded on first use, and the functions the core calls.

The core reaches plugins only through the slots of :mod:`aitune_core.extensions`, which
:func:`install_registry` fills with the registry's functions (``serialization.converter``
extends itself through one, ``Module`` takes its key parts from another, backends run
their steps through ``lifecycle.run_step``). Reading a slot loads nothing: the entry
points that need plugins (``Module()``, ``tune()``, ``load()``, the CLI, a worker) ask for
them with ``extensions.ensure_plugins()``, which calls :func:`current_registry`, and the
public functions below load them too. Importing this module loads neither pluggy nor
the registry: they are imported when the registry is first asked for.

Whatever these functions call or hand out, a plugin whose hook raises is disabled for the
rest of the process and the call goes on without it (``PluginRegistry.disable``), so a
faulty plugin never breaks a module call or ``tune()``.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import TYPE_CHECKING, Any

import aitune_core.extensions as extensions
from aitune_core.plugins.lifecycle import run_step

if TYPE_CHECKING:
    import torch

    from aitune_core.backends.base import Backend
    from aitune_core.plugins.records import Candidate, PluginRecord
    from aitune_core.plugins.registry import PluginRegistry

_lock = threading.RLock()
_registry: PluginRegistry | None = None
_loading = threading.local()


def current_registry() -> PluginRegistry:
    """The process-wide registry, loading every plugin the first time it is asked for."""
    registry = _registry
    if registry is not None:
        return registry
    with _lock:
        if _registry is not None:
            return _registry
        if getattr(_loading, "active", False):
            raise RuntimeError(
                "an aitune plugin used the plugin registry while plugins were loading; "
                "plugins must not build backends or wrap modules when imported or registered"
            )
        from aitune_core.plugins.registry import PluginRegistry  # pluggy and every hook spec: loaded on first use

        _loading.active = True
        try:
            loaded = PluginRegistry.load()
        finally:
            _loading.active = False
        install_registry(loaded)
        return loaded


def install_registry(registry: PluginRegistry | None) -> PluginRegistry | None:
    """Make ``registry`` the process-wide one and return the previous one (tests use this).

    ``None`` means "load again on next use". Container types move from the previous
    registry to the new one, and the cattrs converter is rebuilt, since both come from
    plugins. Installing the previous registry again restores it completely.
    """
    global _registry
    with _lock:
        previous = _registry
        if previous is not registry:
            if previous is not None:
                previous.detach()
            if registry is not None:
                registry.attach()
        _registry = registry
        extensions.fill(_slots_of(registry) if registry is not None else None)
        return previous


def _slots_of(registry: PluginRegistry) -> extensions.Slots:
    """The registry's functions, for the layers below the plugin layer."""
    return extensions.Slots(
        run_step=partial(run_step, registry),
        extend_converter=registry.extend_converter,
        graph_key_parts=registry.graph_key_parts,
        default_candidates=registry.default_candidates,
        executor_classes=registry.executor_classes,
        target_classes=registry.target_classes,
        backend_class=registry.backend_class,
        backend_origin=registry.backend_origin,
        choose_strategy=registry.choose_strategy,
    )


def reset_plugins() -> None:
    """Forget the loaded plugins; the next use discovers and loads them again.

    For tests and notebooks: modules wrapped before the reset keep the graph-key parts
    they were created with.
    """
    install_registry(None)


# --------------------------------------------------------------------------- public queries
def plugins() -> list[PluginRecord]:
    """Every plugin found (built-in first, then by distribution name) with its status."""
    return current_registry().records()


def get_backend_class(name: str) -> type[Backend]:
    """The backend class registered under ``name``; UnknownBackendError lists the known names."""
    return current_registry().backend_class(name)


def backend_names() -> list[str]:
    return current_registry().backend_names()


def default_candidates(device: torch.device | str) -> list[Candidate]:
    """Backends plugins propose for ``device``: highest priority first, ties by name; eager last.

    Unavailable ones are included, with their availability saying why, so strategies
    can skip them and log the reason.
    """
    return current_registry().default_candidates(device)


def choose_strategy(module: Any, device: torch.device | str) -> Any | None:
    """A plugin's strategy for ``module`` when its user chose none, or None."""
    return current_registry().choose_strategy(module, device)
