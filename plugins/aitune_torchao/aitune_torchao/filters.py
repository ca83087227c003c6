"""Which modules get quantized: a rule made of names, so that configs and checkpoints can store it.

torchao's ``quantize_`` takes a ``filter_fn`` callable. A callable cannot be written
to a JSON manifest without pickling it, so the rule here is data instead: module type
names and ``fnmatch`` patterns over fully qualified module names (``"encoder.layers.*"``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

import attrs
import torch


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    """One name or several, as a tuple (configs are frozen and compared by value)."""
    if isinstance(value, str):
        return (value,)
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"module filter entries must be non-empty strings, got {name!r}")
    return names


def _non_empty(_instance: object, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]) -> None:
    if not value:
        raise ValueError(f"ModuleFilter.{attribute.name} needs at least one module type name, such as 'Linear'")


def _type_names(cls: type) -> set[str]:
    """The names a class answers to: its own and those of its bases, plain and qualified."""
    names = set()
    for base in cls.__mro__:
        names.add(base.__name__)
        names.add(f"{base.__module__}.{base.__qualname__}")
    return names


@attrs.frozen
class ModuleFilter:
    """A module is quantized when all of these hold.

    types: its class, or one of its base classes, has one of these names, plain
        (``"Linear"``) or qualified (``"torch.nn.modules.linear.Linear"``). As with
        ``isinstance``, ``"Linear"`` covers subclasses of ``torch.nn.Linear``.
    include: its fully qualified name matches one of these ``fnmatch`` patterns; empty
        includes every module.
    exclude: its fully qualified name matches none of these patterns.

    And, as torchao's own default filter requires, it has a ``weight`` that is a plain
    tensor (not one torchao already quantized through a shared module), and it is not
    ``NonDynamicallyQuantizableLinear`` (attention reads that weight directly) unless
    named in ``types`` itself.
    """

    types: tuple[str, ...] = attrs.field(default=("Linear",), converter=_names, validator=_non_empty)
    include: tuple[str, ...] = attrs.field(default=(), converter=_names)
    exclude: tuple[str, ...] = attrs.field(default=(), converter=_names)

    def matches(self, module: torch.nn.Module, fqn: str) -> bool:
        """Whether to quantize ``module``, found at ``fqn`` ("" for the root)."""
        cls = type(module)
        if not _type_names(cls) & set(self.types):
            return False
        if cls.__name__ == "NonDynamicallyQuantizableLinear" and not {
            cls.__name__,
            f"{cls.__module__}.{cls.__qualname__}",
        } & set(self.types):
            return False
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor) or type(weight) not in (torch.Tensor, torch.nn.Parameter):
            return False
        if self.include and not any(fnmatch.fnmatchcase(fqn, pattern) for pattern in self.include):
            return False
        return not any(fnmatch.fnmatchcase(fqn, pattern) for pattern in self.exclude)

    def describe(self) -> str:
        """``ModuleFilter(include=('encoder.*',))``, with the fields that differ from the defaults."""
        default = ModuleFilter()
        changed = [
            f"{field.name}={getattr(self, field.name)!r}"
            for field in attrs.fields(ModuleFilter)
            if getattr(self, field.name) != getattr(default, field.name)
        ]
        return f"ModuleFilter({','.join(changed)})"
