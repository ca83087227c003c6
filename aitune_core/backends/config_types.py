"""Which config field types survive the trip to JSON and back: checked when a backend is registered.

A config field of a type the converter does not know is passed through as the object
itself; its key then comes from nothing stable and its checkpoint cannot be written.
Checking the field *types* when a plugin registers the backend refuses such a class
at once, naming the field, instead of failing a tuning run hours later.

Known: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any`` (its values are checked
when a candidate passes), ``Literal`` and enums of JSON values, ``Optional`` and other
unions, lists, tuples and ``dict[str, ...]`` of known types, attrs classes whose fields
are known, ``torch.dtype``, ``torch.device``, ``Path``, and any type the converter has
hooks for both ways (what a plugin's ``aitune_extend_converter`` registers).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from pathlib import Path
from typing import Any

import attrs
import cattrs
import torch
from cattrs.fns import identity

CONVERTER_HOOK = "aitune_extend_converter"

_SCALARS: frozenset[Any] = frozenset({str, int, float, bool, type(None)})
_BUILTIN_HOOKED: frozenset[Any] = frozenset({torch.dtype, torch.device, Path})
_ARRAYS = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_SETS = (set, frozenset, collections.abc.Set, collections.abc.MutableSet)


def unsupported_fields(config_class: type, converter: cattrs.Converter) -> list[str]:
    """One line per field of ``config_class`` whose type does not go to JSON and back; empty when all do."""
    try:
        attrs.resolve_types(config_class)
    except Exception as error:
        return [f"its field annotations cannot be resolved ({type(error).__name__}: {error})"]
    problems = []
    for field in attrs.fields(config_class):
        problem = type_problem(field.type, converter, set())
        if problem:
            problems.append(f"field `{field.name}`: {problem}")
    return problems


def type_problem(kind: Any, converter: cattrs.Converter, seen: set[Any]) -> str | None:
    """Why values of ``kind`` would not survive JSON, or None when they do."""
    if kind is Any or kind is object or kind in _SCALARS:
        return None
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Annotated:
        return type_problem(args[0], converter, seen)
    if origin is typing.Union or origin is types.UnionType:
        return _first(args, converter, seen)
    if origin is typing.Literal:
        odd = [value for value in args if type(value) not in _SCALARS]
        return f"Literal value {odd[0]!r} is not a JSON scalar" if odd else None
    if origin in _SETS or kind in _SETS:
        return f"{_name(kind)} does not go to JSON (the converter leaves sets as they are); use a tuple"
    if origin in _ARRAYS:
        return _first(tuple(arg for arg in args if arg is not Ellipsis), converter, seen)
    if origin in _MAPPINGS:
        key = args[0] if args else Any
        if key is not str and not (isinstance(key, type) and issubclass(key, str)):
            return f"{_name(kind)} has {_name(key)} keys, which come back from JSON as strings; use str keys"
        return type_problem(args[1], converter, seen) if len(args) > 1 else None
    if kind in (list, tuple, dict):
        return None  # bare containers hold Any
    return _class_problem(kind, converter, seen)


def _class_problem(kind: Any, converter: cattrs.Converter, seen: set[Any]) -> str | None:
    if not isinstance(kind, type):
        return f"{kind!r} is not a type the converter can structure"
    if kind in _BUILTIN_HOOKED or kind in seen:
        return None
    if issubclass(kind, enum.Enum):
        odd = [member for member in kind if type(member.value) not in _SCALARS]
        return f"enum {_name(kind)} has member {odd[0].name} whose value is not a JSON scalar" if odd else None
    if _hooked(kind, converter):
        return None
    if attrs.has(kind) or dataclasses.is_dataclass(kind):
        seen.add(kind)
        try:
            hints = typing.get_type_hints(kind)
        except Exception as error:
            return f"the annotations of {_name(kind)} cannot be resolved ({type(error).__name__}: {error})"
        names = [field.name for field in (attrs.fields(kind) if attrs.has(kind) else dataclasses.fields(kind))]  # type: ignore[arg-type]
        for name in names:
            problem = type_problem(hints.get(name, Any), converter, seen)
            if problem:
                return f"{_name(kind)}.{name}: {problem}"
        return None
    return f"{_name(kind)} is a type the converter does not know"


def _hooked(kind: type, converter: cattrs.Converter) -> bool:
    """Whether the converter has hooks for ``kind`` both ways (a plugin registered them)."""
    try:
        converter.get_structure_hook(kind)
        unstructure = converter.get_unstructure_hook(kind)
    except Exception:
        return False
    return unstructure is not identity and not attrs.has(kind) and not dataclasses.is_dataclass(kind)


def _first(kinds: tuple[Any, ...], converter: cattrs.Converter, seen: set[Any]) -> str | None:
    for kind in kinds:
        problem = type_problem(kind, converter, seen)
        if problem:
            return problem
    return None


def _name(kind: Any) -> str:
    if isinstance(kind, type) and not typing.get_args(kind):
        return kind.__qualname__
    return repr(kind).replace("typing.", "")


def config_type_error(backend_class: type, problems: list[str]) -> str:
    """The refusal for a backend whose config has fields of unsupported types."""
    return (
        f"{backend_class.__qualname__}.config_class ({backend_class.config_class.__qualname__}) has fields that do "  # type: ignore[attr-defined]
        f"not go to JSON and back: {'; '.join(problems)}; use plain types, or teach the converter the type with "
        f"the {CONVERTER_HOOK} hook (converter.register_unstructure_hook / register_structure_hook)"
    )
