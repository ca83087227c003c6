"""The registry of live wrapped modules: what ``tune`` and checkpoint loads find by name."""

from __future__ import annotations

import threading
import weakref
from typing import Generic, Protocol, TypeVar

from torch import nn


class _Wrapper(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def module(self) -> nn.Module: ...


Wrapper = TypeVar("Wrapper", bound=_Wrapper)


class ModuleRegistry(Generic[Wrapper]):
    """Every live wrapped module, by name. Names are unique; dead wrappers free theirs."""

    def __init__(self) -> None:
        self._modules: weakref.WeakValueDictionary[str, Wrapper] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def add(self, module: Wrapper) -> None:
        with self._lock:
            existing = self._modules.get(module.name)
            if existing is not None and existing is not module:
                raise ValueError(
                    f"an aitune module named {module.name!r} already exists (wrapping "
                    f"{type(existing.module).__name__}); give each aitune_core.Module a unique name"
                )
            self._modules[module.name] = module

    def remove(self, module: Wrapper) -> None:
        with self._lock:
            if self._modules.get(module.name) is module:
                del self._modules[module.name]

    @property
    def modules(self) -> dict[str, Wrapper]:
        with self._lock:
            # items(), not dict(self._modules): that looks each name up again after listing
            # them, and a wrapper collected in between (a garbage collection can run at any
            # allocation) raised KeyError in the middle of tune().
            return dict(self._modules.items())

    def __len__(self) -> int:
        return len(self._modules)
