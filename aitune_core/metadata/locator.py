"""Locators: the address of one leaf inside a call's arguments or outputs.

A locator is rooted at a forward parameter name (for inputs) or at the output value
(root ``None``, shown as ``output``). It gives two paths:

* the *access path*, Python-like and readable (``values[3]["t"]``, ``t3.data``), used in
  reports and as backend tensor names;
* the *semantic path*, a tuple that identifies the leaf stably (``('values', 3, 't')``),
  shown as the bare name when it has a single element.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from aitune_core.metadata.containers import CONTAINERS, StepKind

MAX_DEPTH = 64
OUTPUT_ROOT_NAME = "output"


class Locator:
    """Immutable path from a root to one leaf. Cheap to hash and compare."""

    __slots__ = ("_display", "_hash", "keys", "kinds", "root")

    def __init__(self, root: str | None, keys: tuple[Hashable, ...] = (), kinds: tuple[StepKind, ...] = ()):
        if len(keys) != len(kinds):
            raise ValueError("a locator needs one kind per key")
        self.root = root
        self.keys = keys
        self.kinds = kinds
        self._display: str | None = None
        self._hash = hash((root, keys))

    def child(self, key: Hashable, kind: StepKind) -> Locator:
        return Locator(self.root, (*self.keys, key), (*self.kinds, kind))

    @property
    def semantic_path(self) -> tuple[Hashable, ...]:
        return self.keys if self.root is None else (self.root, *self.keys)

    @property
    def semantic_display(self) -> str:
        path = self.semantic_path
        if len(path) == 1 and isinstance(path[0], str):
            return path[0]
        return repr(path)

    @property
    def display_path(self) -> str:
        if self._display is None:
            parts = [OUTPUT_ROOT_NAME if self.root is None else self.root]
            for key, kind in zip(self.keys, self.kinds, strict=True):
                if kind == "attr":
                    parts.append(f".{key}")
                elif kind == "key" and isinstance(key, str):
                    parts.append(f'["{key}"]')
                else:
                    parts.append(f"[{key!r}]")
            self._display = "".join(parts)
        return self._display

    def get(self, structure: Any) -> Any:
        """Return the leaf this locator points at.

        ``structure`` is the dict of forward arguments for an input locator, or the
        output value itself for an output locator.
        """
        node = structure if self.root is None else structure[self.root]
        for key in self.keys:
            node = _child(node, key)
        return node

    def replace(self, structure: Any, value: Any) -> Any:
        """Return a copy of ``structure`` with this leaf set to ``value``.

        Containers along the path are rebuilt, never mutated, so the caller's data stays
        as it was; a namedtuple stays a namedtuple, a frozen dataclass stays frozen.
        """
        if self.root is None:
            return _replace_in(structure, self.keys, value)
        rebuilt = dict(structure)
        rebuilt[self.root] = _replace_in(structure[self.root], self.keys, value)
        return rebuilt

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Locator) and self.root == other.root and self.keys == other.keys

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Locator({self.display_path})"


def _child(node: Any, key: Hashable) -> Any:
    container = CONTAINERS.lookup(type(node))
    if container is None:
        raise KeyError(f"cannot step into {type(node).__name__} with {key!r}")
    for step, value in container.flatten(node):
        if step == key:
            return value
    raise KeyError(key)


def get_many(structure: Any, locators: list[Locator]) -> list[Any]:
    """The leaves at ``locators`` (rooted at parameter names), flattening each container on their paths once.

    Eight tensors of a two-layer KV cache share their path up to the layer: looking
    each up on its own flattens the cache, its layer list and a layer for every tensor.
    """
    children: dict[tuple[Hashable, ...], dict[Hashable, Any]] = {}
    found = []
    for locator in locators:
        node = structure if locator.root is None else structure[locator.root]
        path: tuple[Hashable, ...] = (locator.root,)
        for key in locator.keys:
            kids = children.get(path)
            if kids is None:
                container = CONTAINERS.lookup(type(node))
                if container is None:
                    raise KeyError(f"cannot step into {type(node).__name__} with {key!r}")
                kids = children[path] = dict(container.flatten(node))
            node = kids[key]
            path = (*path, key)
        found.append(node)
    return found


def _replace_in(node: Any, keys: tuple[Hashable, ...], value: Any) -> Any:
    if not keys:
        return value
    container = CONTAINERS.lookup(type(node))
    if container is None:
        raise KeyError(f"cannot step into {type(node).__name__} with {keys[0]!r}")
    children = container.flatten(node)
    steps = [step for step, _ in children]
    if keys[0] not in steps:
        raise KeyError(keys[0])
    new_children = [_replace_in(child, keys[1:], value) if step == keys[0] else child for step, child in children]
    return container.unflatten(node, new_children)


def walk(value: Any, root: Locator) -> Iterator[tuple[Locator, Any]]:
    """Yield ``(locator, leaf)`` for every leaf under ``value``, depth first, in order.

    Anything that is not a registered container is a leaf, including objects we know
    nothing about: they are reported, never a crash.
    """
    yield from _walk(value, root, 0)


def _walk(value: Any, locator: Locator, depth: int) -> Iterator[tuple[Locator, Any]]:
    container = CONTAINERS.lookup(type(value))
    if container is None:
        yield locator, value
        return
    if depth >= MAX_DEPTH:
        raise ValueError(
            f"{locator.display_path} is nested more than {MAX_DEPTH} levels deep; is the structure cyclic?"
        )
    kind = container.step_kind
    for step, child in container.flatten(value):
        yield from _walk(child, locator.child(step, kind), depth + 1)


def walk_inputs(inputs: dict[str, Any]) -> Iterator[tuple[Locator, Any]]:
    """Walk a dict of forward arguments, each parameter name being a root."""
    for name, value in inputs.items():
        yield from _walk(value, Locator(name), 0)


def walk_outputs(outputs: Any) -> Iterator[tuple[Locator, Any]]:
    yield from _walk(outputs, Locator(None), 0)


def map_leaves(value: Any, locator: Locator, fn: Any) -> Any:
    """Rebuild ``value`` with every leaf replaced by ``fn(locator, leaf)``.

    One pass, bottom up, so rebuilding a structure with many leaves stays linear.
    """
    container = CONTAINERS.lookup(type(value))
    if container is None:
        return fn(locator, value)
    kind = container.step_kind
    children = [map_leaves(child, locator.child(step, kind), fn) for step, child in container.flatten(value)]
    return container.unflatten(value, children)
