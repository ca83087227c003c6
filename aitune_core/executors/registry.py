"""Executors by name: the core's own, and those plugins register with ``aitune_register_executors``.

Names follow the rule for backend names, checked when plugins load: the core's names
cannot be taken, and a name that two plugins claim refuses both plugins, so which
executor ``"ray"`` means never depends on the order plugins were found in.
"""

from __future__ import annotations

import importlib

from aitune_core.executors.base import Executor, ExecutorError
from aitune_core.extensions import slots

BUILTIN_EXECUTORS: dict[str, str] = {
    "auto": "aitune_core.executors.auto:AutoExecutor",
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
    """Executor classes registered by the installed plugins, by name; none when no registry is installed.

    Their names and classes were checked when the plugins loaded
    (:mod:`aitune_core.plugins.named`), under the rule backends follow.
    """
    return slots().executor_classes()


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
