"""The registry of wrapped modules while wrappers die around it."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from aitune_core.module.registry import ModuleRegistry


class CollectsWhenHashed(str):
    """A name whose lookup runs a garbage collection: what an allocation may do at any time."""

    def __hash__(self) -> int:
        gc.collect()
        return str.__hash__(self)


@dataclass(eq=False)
class Named:
    name: str
    module: nn.Module = field(default_factory=nn.Identity)
    me: Any = None


def test_a_wrapper_collected_while_the_modules_are_listed_is_left_out_not_an_error() -> None:
    registry: ModuleRegistry[Named] = ModuleRegistry()
    kept = Named(CollectsWhenHashed("kept"))
    registry.add(kept)
    doomed = Named("doomed")
    doomed.me = doomed  # only a garbage collection frees it
    registry.add(doomed)
    gc.disable()
    try:
        del doomed
        modules = registry.modules
    finally:
        gc.enable()
    assert modules == {"kept": kept}
