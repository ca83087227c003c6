"""Executors by name: the core's own, and those plugins register with ``aitune_register_executors``.

Names follow the rule for backend names: the core's names cannot be taken, and a name
that two plugins claim is refused for both, so which executor ``"ray"`` means never
depends on the order plugins were found in.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from aitune_core.executors.base import Executor, ExecutorError
from aitune_core.extensions import slots
from aitune_core.log import get_logger
from aitune_core.names import is_valid_name

BUILTIN_EXECUTORS: dict[str, str] = {
    "inprocess": "aitune_core.executors.inprocess:InProcessExecutor",
    "subprocess": "aitune_core.executors.isolated.subprocess_executor:SubprocessExecutor",
}
"""The core's executors, imported only when chosen."""

DISTRIBUTIONS: dict[str, str] = {"ray": "aitune-ray"}
"""Where to get executors the core knows of but does not ship, for the error message."""


def _builtin(name: str) -> type[Executor]:
    module, _, attribute = BUILTIN_EXECUTORS[name].partition(":")
    cls: type[Executor] = getattr(importlib.import_module(module), attribute)
    return cls


def plugin_executors() -> dict[str, type[Executor]]:
    """Executor classes registered by loaded plugins, by name (see :func:`collect_executors`)."""
    return slots().executor_classes()


def collect_executors(results: list[tuple[str, Any]]) -> dict[str, type[Executor]]:
    """``(plugin, classes)`` hook results as executors by name; invalid and clashing ones are logged and left out."""
    log = get_logger()
    claims: dict[str, list[tuple[str, type[Executor]]]] = {}
    for plugin_id, classes in results:
        for cls in classes:
            problem = _problem(cls)
            if problem is not None:
                log.warning("executor refused", plugin=plugin_id, reason=problem)
                continue
            claims.setdefault(cls.name, []).append((plugin_id, cls))
    found: dict[str, type[Executor]] = {}
    for name, owners in sorted(claims.items()):
        plugins = " and ".join(plugin_id for plugin_id, _ in owners)
        if name in BUILTIN_EXECUTORS:
            log.warning("executor refused", plugin=plugins, reason=f"the name {name!r} belongs to aitune-core")
        elif len({cls for _, cls in owners}) > 1:
            log.warning("executor refused", plugin=plugins, reason=f"{plugins} all register an executor {name!r}")
        else:
            found[name] = owners[0][1]
    return found


def _problem(cls: object) -> str | None:
    if not (isinstance(cls, type) and issubclass(cls, Executor)):
        return f"aitune_register_executors returned {cls!r}, which is not an Executor subclass"
    if not is_valid_name(cls.name):
        return f"{cls.__qualname__}.name must be a lowercase name such as 'my_cluster', got {cls.name!r}"
    if inspect.isabstract(cls):
        return f"{cls.__qualname__} is abstract (missing {', '.join(sorted(cls.__abstractmethods__))})"
    return None


def executor_names() -> list[str]:
    """Every executor that can be chosen by name here."""
    return sorted({*BUILTIN_EXECUTORS, *plugin_executors()})


def get_executor_class(name: str) -> type[Executor]:
    """The executor class registered as ``name``; ExecutorError lists the names there are."""
    if name in BUILTIN_EXECUTORS:
        return _builtin(name)
    found = plugin_executors()
    if name in found:
        return found[name]
    message = f"unknown executor {name!r}; choose one of: {', '.join(sorted({*BUILTIN_EXECUTORS, *found}))}"
    if name in DISTRIBUTIONS:
        message += f" (install {DISTRIBUTIONS[name]} for {name!r})"
    raise ExecutorError(message)


def resolve_executor(spec: str | Executor) -> tuple[Executor, bool]:
    """The executor ``spec`` names, and whether the caller created it (and so must close it)."""
    if isinstance(spec, Executor):
        return spec, False
    if not isinstance(spec, str):
        raise TypeError(f"executor must be a name or an Executor instance, got {type(spec).__name__}")
    return get_executor_class(spec)(), True
