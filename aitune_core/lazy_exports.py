"""Public names that a module offers but imports on first access.

``import aitune_core`` and ``import aitune_core.plugin_api`` stay cheap next to
``import torch`` this way; each lists its names, and this module gives it the
``__getattr__`` and ``__dir__`` that load them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str], unknown: Callable[[str], str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` for a module whose ``exports`` map each name to the module defining it.

    ``namespace`` is the module's ``globals()``: a loaded name is bound there, so the next read never
    comes back here. ``unknown`` words the error for a name the module does not offer.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(unknown(name))
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
