"""Putting a model back exactly as it was when applying a checkpoint fails half-way.

Applying a checked plan can still fail (a backend that cannot deploy here, a device
that runs out of memory). The snapshot keeps what applying changes: each parameter's
and buffer's tensor and a copy of its values, each submodule's mode, the submodules
swapped for wrappers, and the routes of wrappers that were already there. Restoring
puts the same objects back, so references the user holds stay valid.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from torch import nn

from aitune_core.module.wrapper import MODULE_REGISTRY, Module


class _ModuleState:
    """One module tree's tensors (objects, data and values) and modes."""

    def __init__(self, module: nn.Module) -> None:
        self.modules = list(module.modules())
        self.training = [m.training for m in self.modules]
        self.parameters: list[dict[str, Any]] = [dict(m._parameters) for m in self.modules]
        self.buffers: list[dict[str, Any]] = [dict(m._buffers) for m in self.modules]
        self.values: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        seen: set[int] = set()
        for tensors in (*self.parameters, *self.buffers):
            for tensor in tensors.values():
                if tensor is None or id(tensor) in seen:
                    continue
                seen.add(id(tensor))
                with torch.no_grad():
                    self.values.append((tensor, tensor.data, tensor.detach().clone()))

    def restore(self) -> None:
        for module, training, parameters, buffers in zip(
            self.modules, self.training, self.parameters, self.buffers, strict=True
        ):
            module.training = training
            module._parameters.clear()
            module._parameters.update(parameters)
            module._buffers.clear()
            module._buffers.update(buffers)
        with torch.no_grad():
            for tensor, data, values in self.values:
                tensor.data = data
                data.copy_(values)


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
