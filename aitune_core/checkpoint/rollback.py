"""Putting a model back exactly as it was when applying a checkpoint fails half-way.

Applying a checked plan can still fail (a backend that cannot deploy here, a device
that runs out of memory). The snapshot keeps what applying changes: each parameter's
and buffer's tensor and a copy of its values, each submodule's mode (all as the tuning
guard keeps them, :mod:`aitune_core.guard`), the submodules swapped for wrappers, and
the routes of wrappers that were already there. Restoring puts the same objects back,
so references the user holds stay valid.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from torch import nn

from aitune_core.guard import ModuleSnapshot, WeightCopy
from aitune_core.module.wrapper import MODULE_REGISTRY, Module


class _ModuleState:
    """One module tree as the tuning guard keeps it: modes and tensor objects, and a copy of the values."""

    def __init__(self, module: nn.Module) -> None:
        self.snapshot = ModuleSnapshot(module, "")
        self.values = WeightCopy(self.snapshot)

    def restore(self) -> None:
        self.snapshot.restore_structure()
        for tracked in self.snapshot.tensors.values():
            self.values.restore(tracked.tensor)


class _WrapperState:
    """A wrapper that was already in the model: its graphs, routes and state."""

    def __init__(self, wrapper: Module) -> None:
        self.wrapper = wrapper
        self.routes: dict[Hashable, Any] = dict(wrapper.routes)
        self.graphs = dict(wrapper._recorder.graphs)
        self.own: dict[str, Any] = {
            key: wrapper.__dict__[key] for key in ("_state", "_unseen") if key in wrapper.__dict__
        }
        self.released = wrapper.__dict__.get("_weights_released")

    def restore(self) -> None:
        recorder_graphs = self.wrapper._recorder.graphs
        recorder_graphs.clear()
        recorder_graphs.update(self.graphs)
        self.wrapper.__dict__["_routes"] = self.routes
        self.wrapper.__dict__.update(self.own)
        if self.released is None:
            self.wrapper.__dict__.pop("_weights_released", None)


class ModelSnapshot:
    """What applying a checkpoint to ``modules`` may change, ready to be put back."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self._states = [_ModuleState(module.module if isinstance(module, Module) else module) for module in modules]
        self._wrappers = [_WrapperState(module) for module in modules if isinstance(module, Module)]
        self._swaps: list[tuple[nn.Module, str, nn.Module]] = []
        self._created: list[Module] = []

    def record_swap(self, parent: nn.Module, attribute: str, original: nn.Module) -> None:
        self._swaps.append((parent, attribute, original))

    def record_wrapper(self, wrapper: Module) -> None:
        self._created.append(wrapper)

    def restore(self) -> None:
        for parent, attribute, original in reversed(self._swaps):
            setattr(parent, attribute, original)
        for wrapper in self._created:
            MODULE_REGISTRY.remove(wrapper)
        for wrapper_state in self._wrappers:
            wrapper_state.restore()
        for state in self._states:
            state.restore()
