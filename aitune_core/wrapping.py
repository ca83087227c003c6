"""``wrap`` and ``unwrap``: put :class:`Module` wrappers on a model's submodules by path, and take them off.

Wrapping by hand means editing the model's code: the first wall a user hits with a
model they did not write. ``wrap`` takes dotted paths with glob segments, as
``named_modules`` prints them (``"encoder"``, ``"decoder.layers.*"``, ``"**.attn"``),
and swaps each match for a wrapper named by its path.

Wrappers already in the model are left alone: ``wrap`` never clears them, never
wraps a wrapper again, and never wraps inside one (the outer wrapper's graphs would
then hold calls routed by the inner). A match inside another match is skipped for the
same reason; the outer one is wrapped.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

from torch import nn

from aitune_core.log import get_logger
from aitune_core.module.wrapper import Module


class WrapError(ValueError):
    """A pattern matched nothing, or a wrapper could not be made."""


def matches(pattern: str, path: str) -> bool:
    """Whether a dotted path matches a pattern of glob segments; ``**`` matches any number of segments."""
    return _match(pattern.split("."), path.split(".") if path else [])


def _match(pattern: list[str], path: list[str]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match(rest, path[index:]) for index in range(len(path) + 1))
    return bool(path) and fnmatch.fnmatchcase(path[0], head) and _match(rest, path[1:])


def wrap(model: nn.Module, patterns: str | Iterable[str], strategy: Any = None, prefix: str = "") -> list[Module]:
    """Replace the submodules matching ``patterns`` with wrappers named ``prefix + path``; returns them.

    strategy: given to every new wrapper (None: the one ``tune`` is given).
    prefix: added to every wrapper name, for a second model in the same process
        (wrapper names are unique per process).
    Raises WrapError, naming the available paths, when a pattern matches nothing.
    """
    if isinstance(model, Module):
        raise WrapError(f"the model is itself the aitune module {model.name!r}; wrap the model it is part of")
    wanted = [patterns] if isinstance(patterns, str) else list(patterns)
    if not wanted or not all(isinstance(p, str) and p for p in wanted):
        raise WrapError(f"patterns must be non-empty strings such as 'encoder' or 'layers.*', got {patterns!r}")
    candidates = _unwrapped_paths(model)
    chosen: list[str] = []
    for pattern in wanted:
        found = [path for path in candidates if matches(pattern, path)]
        if not found:
            raise WrapError(f"no submodule of {type(model).__name__} matches {pattern!r}; {_available(candidates)}")
        chosen += [path for path in found if path not in chosen]
    outermost = [path for path in chosen if not any(_inside(path, other) for other in chosen)]
    log = get_logger()
    for path in chosen:
        if path not in outermost:
            log.info("not wrapped: inside another match", path=path)
    wrappers = []
    for path in outermost:
        parent, attribute = _parent(model, path)
        inner = parent._modules[attribute]
        assert inner is not None
        wrapper = Module(inner, prefix + path, strategy=strategy)
        parent._modules[attribute] = wrapper  # as setattr would, without touching the parent's other state
        wrappers.append(wrapper)
    log.info("wrapped", modules=[w.name for w in wrappers])
    return wrappers


def unwrap(model: nn.Module) -> list[str]:
    """Put back the original of every wrapper inside ``model``; returns the names unwrapped.

    Their backends are released: calls run the original modules again.
    """
    unwrapped = []
    for path, wrapper in list(_wrappers(model)):
        parent, attribute = _parent(model, path)
        wrapper.deactivate()
        parent._modules[attribute] = wrapper.module
        unwrapped.append(wrapper.name)
    return unwrapped


def _wrappers(model: nn.Module, path: str = "") -> Iterable[tuple[str, Module]]:
    for name, child in model._modules.items():
        if child is None:
            continue
        here = f"{path}.{name}" if path else name
        if isinstance(child, Module):
            yield here, child
        else:
            yield from _wrappers(child, here)


def _unwrapped_paths(model: nn.Module, path: str = "") -> list[str]:
    """Every submodule path outside existing wrappers (which are neither wrapped again nor entered)."""
    found = []
    for name, child in model._modules.items():
        if child is None or isinstance(child, Module):
            continue
        here = f"{path}.{name}" if path else name
        found.append(here)
        found += _unwrapped_paths(child, here)
    return found


def _inside(path: str, other: str) -> bool:
    return path != other and path.startswith(other + ".")


def overlaps(first: str, second: str) -> bool:
    """Whether two dotted submodule paths name the same module, or one holds the other."""
    return first == second or _inside(first, second) or _inside(second, first)


def _parent(model: nn.Module, path: str) -> tuple[nn.Module, str]:
    *steps, attribute = path.split(".")
    parent = model
    for step in steps:
        child = parent._modules[step]
        assert child is not None
        parent = child
    return parent, attribute


def _available(paths: list[str]) -> str:
    top = [path for path in paths if "." not in path]
    shown = ", ".join(top[:12]) + (", ..." if len(top) > 12 else "")
    return f"its top-level submodules are {shown or 'none'} (deeper ones are dotted, e.g. 'encoder.layers.*')"
