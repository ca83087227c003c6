"""Shells: shallow copies of the user's modules that run their own forward with some submodules swapped.

The user's module is never changed, not even for a moment, so a partition cannot
assign its routed children into the parent. A shell is a new instance of the parent's
class whose instance dict is a copy of the parent's: parameters, buffers, hooks and
plain attributes are the very same objects (so weights stay shared and ``.to()`` on the
model reaches them), but its ``_modules`` is a dict of its own, where some children are
replaced. The parent's forward, run on the shell, then calls the replacements: the
control flow between children stays the parent's own Python.

A replacement for a child is a shell of that child whose ``forward`` is an instance
attribute: attribute reads (``self.block.weight``) and ``isinstance`` checks in the
parent's forward see the child as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn


def shallow_copy(module: nn.Module) -> nn.Module:
    """A new instance of ``module``'s class sharing every attribute value, with a ``_modules`` dict of its own.

    No user code runs: neither ``__init__`` nor ``__copy__``/``__setstate__``.
    """
    shell = object.__new__(type(module))
    shell.__dict__.update(module.__dict__)
    shell.__dict__["_modules"] = dict(module._modules)
    return shell


def with_children(module: nn.Module, replacements: Mapping[str, nn.Module]) -> nn.Module:
    """A shell of ``module`` where each dotted path in ``replacements`` is the module given.

    Containers on the way (``layers`` for ``layers.0``) become shells too, so that
    ``self.layers[0]`` and iterating ``self.layers`` in the forward find the replacement.
    """
    shell = shallow_copy(module)
    nested: dict[str, dict[str, nn.Module]] = {}
    for path, replacement in replacements.items():
        head, _, rest = path.partition(".")
        if head not in shell._modules:
            raise KeyError(f"{type(module).__name__} has no submodule {head!r}")
        if rest:
            nested.setdefault(head, {})[rest] = replacement
        else:
            shell._modules[head] = replacement
    for head, inner in nested.items():
        child = shell._modules[head]
        assert child is not None
        shell._modules[head] = with_children(child, inner)
    return shell


def with_forward(module: nn.Module, forward: Callable[..., Any]) -> nn.Module:
    """A shell of ``module`` whose calls go to ``forward`` (its hooks still run around it)."""
    shell = shallow_copy(module)
    shell.__dict__["forward"] = forward
    return shell
