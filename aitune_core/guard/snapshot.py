"""A cheap record of a module's state: what a tuning step must leave as it found it.

Taking one reads attributes only: every submodule's ``training`` flag and its dicts of
children, parameters and buffers, and for each parameter and buffer its object, version
counter, storage address, dtype, device, shape and strides. No tensor data is read or
copied, so a snapshot costs about a microsecond per tensor and can be taken around
every step.

What each part catches: the version counter moves with every in-place write made
through the tensor (``torch.no_grad()`` included); the storage address, dtype, device
and strides move with ``.data = ...``, ``.to()`` and ``.half()``; the dicts show a
Parameter, buffer or submodule swapped for another object. Writes through ``.data``
(``weight.data.mul_(2)``) move none of these: the guard compares values with its copy
of the weights for those (:mod:`aitune_core.guard.weights`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

Fingerprint = tuple[Any, ...]
"""``(version, data_ptr, dtype, device, shape, strides)``, None where a kind of tensor has no such
thing. A plain tuple: taking and comparing one is most of what a snapshot costs."""

VERSION = 0


def fingerprint(tensor: torch.Tensor) -> Fingerprint:
    """What a tensor looks like from outside, without reading its data.

    The one fingerprint of a tensor in aitune: the guard compares it around every step,
    a tuned module's staleness check keeps its version and storage parts, and the load
    test guard its storage parts.
    """
    try:  # the common case in one step: a snapshot's cost is mostly this
        return tensor._version, tensor.data_ptr(), tensor.dtype, tensor.device, tensor.shape, tensor.stride()
    except RuntimeError:
        return version_of(tensor), storage_of(tensor), tensor.dtype, tensor.device, tensor.shape, _strides(tensor)


def version_of(tensor: torch.Tensor) -> int | None:
    """The counter that every in-place write through the tensor moves; None for inference tensors."""
    try:
        return tensor._version
    except RuntimeError:  # inference tensors keep no version counter
        return None


def storage_of(tensor: torch.Tensor) -> int | None:
    """The address of the tensor's data; None for tensor subclasses without storage of their own."""
    try:
        return tensor.data_ptr()
    except RuntimeError:
        return None


def _strides(tensor: torch.Tensor) -> tuple[int, ...] | None:
    try:
        return tensor.stride()
    except RuntimeError:  # sparse layouts
        return None


def same_storage(first: Fingerprint, second: Fingerprint) -> bool:
    """Everything but the version counter is equal: the same memory, seen the same way."""
    return first[1:] == second[1:]


_NOTHING: dict[str, Any] = {}
"""Shared by records of modules without children, parameters or buffers; never written."""


class _Record:
    """One submodule as the snapshot found it."""

    __slots__ = ("buffers", "children", "module", "parameters", "path", "training")

    def __init__(self, path: str, module: nn.Module) -> None:
        self.path = path
        self.module = module
        self.training = module.training
        self.children: dict[str, nn.Module | None] = dict(module._modules) if module._modules else _NOTHING
        self.parameters: dict[str, torch.Tensor | None] = dict(module._parameters) if module._parameters else _NOTHING
        self.buffers: dict[str, torch.Tensor | None] = dict(module._buffers) if module._buffers else _NOTHING


class TrackedTensor:
    """A parameter or buffer: the object itself (to put it back) and how it looked."""

    __slots__ = ("fingerprint", "path", "tensor")

    def __init__(self, path: str, tensor: torch.Tensor) -> None:
        self.path = path
        self.tensor = tensor
        self.fingerprint = fingerprint(tensor)


class ModuleSnapshot:
    """The state of ``module`` and all its submodules, named from ``name`` (``encoder.0.weight``).

    It keeps references to the objects it saw, so that :meth:`restore_structure` can
    put back a replaced Parameter, buffer or submodule: the very object, which
    optimizers, tied weights and user code may still hold.
    """

    def __init__(self, module: nn.Module, name: str) -> None:
        self.records: list[_Record] = []
        _walk(module, name, set(), self.records)
        self.tensors: dict[int, TrackedTensor] = {}
        for record in self.records:
            for kind in (record.parameters, record.buffers):
                for key, tensor in kind.items():
                    if tensor is not None and id(tensor) not in self.tensors:  # tied weights: the first name
                        self.tensors[id(tensor)] = TrackedTensor(f"{record.path}.{key}", tensor)

    def changes(self) -> tuple[list[str], list[TrackedTensor]]:
        """What differs now, in words, and the tracked tensors whose data may have changed."""
        messages = _mode_changes(self.records)
        for record in self.records:
            module = record.module
            messages += _dict_changes(record.path, "submodule", record.children, module._modules)
            messages += _dict_changes(record.path, "parameter", record.parameters, module._parameters)
            messages += _dict_changes(record.path, "buffer", record.buffers, module._buffers)
        touched = []
        for tracked in self.tensors.values():
            now = fingerprint(tracked.tensor)
            if now != tracked.fingerprint:
                messages.append(f"{tracked.path} {describe_change(tracked.fingerprint, now)}")
                touched.append(tracked)
        return messages, touched

    def restore_structure(self) -> None:
        """Put back every training flag and every child, parameter and buffer object as recorded.

        Dicts are updated in place: an ``aitune_core.Module`` wrapper shares them with
        the module it wraps.
        """
        for record in self.records:
            module = record.module
            module.training = record.training
            _restore_dict(module._modules, record.children)
            _restore_dict(module._parameters, record.parameters)
            _restore_dict(module._buffers, record.buffers)


def _walk(module: nn.Module, path: str, seen: set[int], records: list[_Record]) -> None:
    """``named_modules()``, without its generators: each submodule once, in the same order."""
    if id(module) in seen:
        return
    seen.add(id(module))
    records.append(_Record(path, module))
    for key, child in module._modules.items():
        if child is not None:
            _walk(child, f"{path}.{key}", seen, records)


def _mode_changes(records: list[_Record]) -> list[str]:
    """One line per flipped flag, or one for all when ``.train()``/``.eval()`` flipped the whole module."""
    flipped = [record for record in records if record.module.training != record.training]
    if len(flipped) > 1 and len(flipped) == len(records) and len({r.module.training for r in flipped}) == 1:
        root = flipped[0]
        return [
            f"{root.path}.training flipped to {root.module.training}, and that of all its {len(flipped) - 1} submodules"
        ]
    return [f"{record.path}.training flipped to {record.module.training}" for record in flipped]


def describe_change(before: Fingerprint, after: Fingerprint) -> str:
    """``was modified in place (version 3 → 4)``, ``moved from cpu to cuda:0``, ..."""
    version, pointer, dtype, device, shape, strides = before
    new_version, new_pointer, new_dtype, new_device, new_shape, new_strides = after
    parts = []
    if dtype != new_dtype:
        parts.append(f"changed dtype from {_dtype(dtype)} to {_dtype(new_dtype)}")
    if device != new_device:
        parts.append(f"moved from {device} to {new_device}")
    if shape != new_shape:
        parts.append(f"changed shape from {list(shape)} to {list(new_shape)}")
    elif strides != new_strides:
        parts.append(f"changed memory format (strides {strides} → {new_strides})")
    if not parts and pointer != new_pointer:
        parts.append("had its data replaced (.data assigned)")
    if version != new_version:
        parts.append(f"was modified in place (version {version} → {new_version})")
    return ", ".join(parts) or "changed"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dict_changes(path: str, kind: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    if before.keys() == after.keys() and all(before[key] is after[key] for key in before):
        return []
    messages = []
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if old is new:
            continue
        if key not in after or new is None:
            messages.append(f"{kind} {path}.{key} was removed")
        elif key not in before or old is None:
            messages.append(f"{kind} {path}.{key} was added ({type(new).__name__})")
        else:
            messages.append(f"{kind} {path}.{key} was replaced by another {type(new).__name__} object")
    return sorted(messages)


def _restore_dict(target: dict[str, Any], recorded: dict[str, Any]) -> None:
    if target.keys() == recorded.keys() and all(target[key] is recorded[key] for key in recorded):
        return
    target.clear()
    target.update(recorded)
