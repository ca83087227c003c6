"""Starting the JIT from the environment: ``AITUNE_JIT=1 python script.py``, with no change to the script.

The ``aitune_jit.pth`` file that installing aitune-core puts into site-packages runs
this file's :func:`start` at interpreter start when ``AITUNE_JIT`` is set. It is loaded
by path, not imported as ``aitune_jit.startup``: importing anything in
``aitune_core`` imports torch, a second or more that a process which never uses torch
must not pay. So this file uses the standard library only, waits for the script's own
``import torch``, and enables the JIT once torch's code has run.

``AITUNE_JIT`` is taken out of the environment, so that processes this one starts
(aitune's own candidate workers, a data loader's) do not tune models of their own.
Nothing here may stop the interpreter or the script's import: every failure is one
line on stderr.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

OFF = ("", "0", "false", "no", "off")


def start() -> None:
    value = os.environ.pop("AITUNE_JIT", "")
    if value.strip().lower() in OFF:
        return
    try:
        when_imported("torch", _enable)
    except Exception as error:
        _say(error)


def _enable(_torch: ModuleType) -> None:
    try:
        from aitune_jit.api import enable

        enable()
    except Exception as error:
        _say(error)


def _say(error: BaseException) -> None:
    print(f"aitune: AITUNE_JIT ignored: {type(error).__name__}: {error}", file=sys.stderr)


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once the top-level module ``name`` is imported (now, if it is)."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    sys.meta_path.insert(0, _Watcher(name, callback))


class _Watcher(importlib.abc.MetaPathFinder):
    """Lets the other finders find ``name``, and wraps its loader's ``exec_module`` to call back after."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once; and the search below must not come back here
        spec = importlib.util.find_spec(fullname)
        loader: Any = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        callback = self.callback

        def exec_then_call_back(module: ModuleType) -> None:
            try:
                exec_module(module)
            finally:
                with contextlib.suppress(AttributeError):
                    del loader.exec_module  # the loader's own method again
            try:
                callback(module)
            except Exception as error:  # the script's import succeeds whatever the callback does
                _say(error)

        loader.exec_module = exec_then_call_back
        return spec
