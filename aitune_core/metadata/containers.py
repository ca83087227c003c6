"""Container types that metadata capture walks into.

Every container is described by how to list its children (``flatten``) and how to
build a new one from replacement children (``unflatten``). Building a new container
instead of mutating the old one is what lets ``make_batch`` and ``Locator.replace``
promise never to touch the caller's data, and it is the only way to handle tuples,
namedtuples and frozen dataclasses at all.

Plugins add types (a library's output classes, say) with :func:`register_container`,
directly or through the ``aitune_register_containers`` hook.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal

import attrs

StepKind = Literal["index", "key", "attr"]
Children = Sequence[tuple[Hashable, Any]]


@attrs.frozen
class ContainerType:
    """How to walk one kind of container.

    ``step_kind`` decides how a child is shown in access paths: ``[0]`` for ``index``,
    ``["k"]`` for ``key`` and ``.name`` for ``attr``.
    """

    name: str
    step_kind: StepKind
    flatten: Callable[[Any], Children]
    unflatten: Callable[[Any, Sequence[Any]], Any]


def _flatten_sequence(value: Sequence[Any]) -> Children:
    return list(enumerate(value))


def _flatten_dict(value: dict[Any, Any]) -> Children:
    return list(value.items())


def _unflatten_dict(value: dict[Any, Any], children: Sequence[Any]) -> dict[Any, Any]:
    rebuilt = copy.copy(value)  # keeps OrderedDict, defaultdict and other dict subclasses
    for key, child in zip(value.keys(), children, strict=True):
        rebuilt[key] = child
    return rebuilt


def _unflatten_list(value: list[Any], children: Sequence[Any]) -> list[Any]:
    if type(value) is list:
        return list(children)
    rebuilt = copy.copy(value)
    rebuilt[:] = children
    return rebuilt


def _unflatten_tuple(value: tuple[Any, ...], children: Sequence[Any]) -> tuple[Any, ...]:
    return type(value)(children) if type(value) is not tuple else tuple(children)


def _unflatten_namedtuple(value: Any, children: Sequence[Any]) -> Any:
    return type(value)(*children)


def _flatten_dataclass(value: Any) -> Children:
    return [(field.name, getattr(value, field.name)) for field in dataclasses.fields(value)]


def _unflatten_dataclass(value: Any, children: Sequence[Any]) -> Any:
    # copy + object.__setattr__ works for frozen dataclasses and init=False fields alike,
    # where dataclasses.replace would fail.
    rebuilt = copy.copy(value)
    for field, child in zip(dataclasses.fields(value), children, strict=True):
        object.__setattr__(rebuilt, field.name, child)
    return rebuilt


SEQUENCE_LIST = ContainerType("list", "index", _flatten_sequence, _unflatten_list)
SEQUENCE_TUPLE = ContainerType("tuple", "index", _flatten_sequence, _unflatten_tuple)
NAMEDTUPLE = ContainerType("namedtuple", "attr", lambda v: list(zip(v._fields, v, strict=True)), _unflatten_namedtuple)
MAPPING = ContainerType("dict", "key", _flatten_dict, _unflatten_dict)
DATACLASS = ContainerType("dataclass", "attr", _flatten_dataclass, _unflatten_dataclass)


class ContainerRegistry:
    """Maps a Python type to the :class:`ContainerType` that walks it.

    Lookups are cached per exact type, so the hot recording path pays one dict lookup
    per value. Leaves (tensors, numbers, unknown objects) are cached as ``None``.
    """

    def __init__(self) -> None:
        self._registered: dict[type, ContainerType] = {}
        self._cache: dict[type, ContainerType | None] = {}

    def register(
        self,
        cls: type,
        flatten: Callable[[Any], Children],
        unflatten: Callable[[Any, Sequence[Any]], Any],
        step_kind: StepKind = "attr",
        name: str | None = None,
    ) -> None:
        """Teach metadata capture to walk into instances of ``cls`` (and its subclasses).

        ``flatten(obj)`` returns ``[(step, child), ...]``; ``unflatten(obj, children)``
        returns a new object holding ``children`` in the same order. Example::

            register_container(
                ModelOutput,
                flatten=lambda o: [(k, getattr(o, k)) for k in o.keys()],
                unflatten=lambda o, children: ModelOutput(**dict(zip(o.keys(), children))),
            )
        """
        if not isinstance(cls, type):
            raise TypeError(f"register() takes a class, got {cls!r}")
        if step_kind not in ("index", "key", "attr"):
            raise ValueError(f"step_kind must be 'index', 'key' or 'attr', got {step_kind!r}")
        if not callable(flatten) or not callable(unflatten):
            raise TypeError(f"flatten and unflatten of {cls.__qualname__} must be callables")
        self.add(cls, ContainerType(name or cls.__qualname__, step_kind, flatten, unflatten))

    def add(self, cls: type, container: ContainerType) -> None:
        self._registered[cls] = container
        self._cache.clear()

    def items(self) -> list[tuple[type, ContainerType]]:
        """The types registered here, in order; the built-in kinds are not among them."""
        return list(self._registered.items())

    def unregister(self, cls: type) -> None:
        self._registered.pop(cls, None)
        self._cache.clear()

    def lookup(self, cls: type) -> ContainerType | None:
        try:
            return self._cache[cls]
        except KeyError:
            found = self._resolve(cls)
            self._cache[cls] = found
            return found

    def _resolve(self, cls: type) -> ContainerType | None:
        for base in cls.__mro__:
            if base in self._registered:
                return self._registered[base]
        if issubclass(cls, tuple):
            return NAMEDTUPLE if hasattr(cls, "_fields") else SEQUENCE_TUPLE
        if issubclass(cls, list):
            return SEQUENCE_LIST
        if issubclass(cls, dict):
            return MAPPING
        if dataclasses.is_dataclass(cls):
            return DATACLASS
        return None


CONTAINERS = ContainerRegistry()


register_container = CONTAINERS.register
"""Register a container type with the process-wide registry (:meth:`ContainerRegistry.register`)."""
