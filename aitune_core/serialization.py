"""The cattrs converter that turns aitune state into JSON-ready data and back.

Everything aitune persists (backend configs, graph specs, checkpoint manifests) goes
through this converter; nothing is pickled. Plugins teach it their own types through
the ``aitune_extend_converter`` hook.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import cattrs
import torch
from cattrs.cols import homogenous_tuple_structure_factory, is_sequence, list_structure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.v import format_exception

from aitune_core.extensions import Slots, slots

T = TypeVar("T")

_DTYPES = {str(dtype): dtype for dtype in vars(torch).values() if isinstance(dtype, torch.dtype)}


def dtype_from_str(name: str) -> torch.dtype:
    try:
        return _DTYPES[name if name.startswith("torch.") else f"torch.{name}"]
    except KeyError:
        raise ValueError(f"unknown torch dtype {name!r}") from None


_JSON_NAMES = {str: "a string", int: "a whole number", float: "a number", bool: "true or false"}


class ConfigDataError(ValueError):
    """Stored config data that does not fit its config class; the message names each field."""


def strict_scalar(kind: type) -> Callable[[Any, Any], Any]:
    """Structure ``kind`` only from a JSON value of that type.

    cattrs' default calls the type on anything (``bool("no")`` is True, ``str([...])``
    is text), so data from a checkpoint would pass any field's type. A bool is not a
    whole number here, and a whole number is a valid float. Subclasses (enums on
    ``int`` or ``str``) are made from the checked value, as cattrs does.
    """

    def structure(value: Any, cl: Any) -> Any:
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise TypeError(f"expected {_JSON_NAMES[kind]}, got {type(value).__name__} {value!r:.60}")
        return value if cl is kind else cl(value)

    return structure


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected {what} (a string), got {type(value).__name__} {value!r:.60}")
    return value


def make_converter() -> cattrs.Converter:
    converter = cattrs.Converter()
    for kind in (str, int, float, bool):
        converter.register_structure_hook(kind, strict_scalar(kind))
    converter.register_unstructure_hook(torch.dtype, str)
    converter.register_structure_hook(torch.dtype, lambda value, _: dtype_from_str(_text(value, "a dtype name")))
    converter.register_unstructure_hook(torch.device, str)
    converter.register_structure_hook(torch.device, lambda value, _: torch.device(_text(value, "a device name")))
    converter.register_unstructure_hook(Path, str)
    converter.register_structure_hook(Path, lambda value, _: Path(_text(value, "a path")))
    _arrays_only(converter)
    _without_unsafe_options(converter)
    return converter


def _arrays_only(converter: cattrs.Converter) -> None:
    """List and tuple fields take a JSON array: cattrs would iterate a string into its characters."""

    def is_array(cl: Any) -> bool:
        return getattr(cl, "__origin__", cl) in (list, tuple) and is_sequence(cl)

    def factory(cl: Any) -> Callable[[Any, Any], Any]:
        origin = getattr(cl, "__origin__", cl)
        inner = (list_structure_factory if origin is list else homogenous_tuple_structure_factory)(cl, converter)

        def structure(value: Any, target: Any) -> Any:
            if not isinstance(value, (list, tuple)):
                raise TypeError(f"expected a list, got {type(value).__name__} {value!r:.60}")
            return inner(value, target)

        return structure

    converter.register_structure_hook_factory(is_array, factory)


CODE_ONLY_FIELDS = "__aitune_code_only_fields__"
"""A class attribute naming fields that code may set but data never carries (``unsafe_options``)."""


def _without_unsafe_options(converter: cattrs.Converter) -> None:
    """Backend configs go to data and back without ``unsafe_options``: only code sets it.

    Data never carries it, so no checkpoint or shipped config can turn it on, and data
    that does carry it is read as if it did not (``Backend.from_dict`` refuses it outright).
    Classes name such fields in :data:`CODE_ONLY_FIELDS` (``BackendConfig`` does), so
    this layer need not know them.
    """

    def is_marked(cl: Any) -> bool:
        return isinstance(cl, type) and bool(getattr(cl, CODE_ONLY_FIELDS, ()))

    def omitted(cl: Any) -> dict[str, Any]:
        return {name: override(omit=True) for name in getattr(cl, CODE_ONLY_FIELDS)}

    converter.register_unstructure_hook_factory(
        is_marked, lambda cl: make_dict_unstructure_fn(cl, converter, **omitted(cl))
    )
    converter.register_structure_hook_factory(
        is_marked, lambda cl: make_dict_structure_fn(cl, converter, **omitted(cl))
    )


_converter: tuple[Slots, cattrs.Converter] | None = None


def converter() -> cattrs.Converter:
    """The process-wide converter, extended by the installed plugins; made again when other ones are installed."""
    global _converter
    current = slots()
    if _converter is None or _converter[0] is not current:
        built = make_converter()
        current.extend_converter(built)
        _converter = (current, built)
    return _converter[1]


def _described(error: BaseException, cl: Any) -> str:
    """An error as its own message: validators and :func:`strict_scalar` name the fix."""
    if isinstance(error, (TypeError, ValueError)) and error.args and isinstance(error.args[0], str):
        return error.args[0]  # attrs' instance_of puts its message first, then the attribute
    return format_exception(error, cl)


def structure_config(data: Any, cl: type[T]) -> T:
    """``data`` (from a checkpoint, a worker) as a ``cl`` config, or a :class:`ConfigDataError` naming each field."""
    try:
        return converter().structure(data, cl)
    except cattrs.BaseValidationError as error:
        details = "; ".join(cattrs.transform_error(error, path="config", format_exception=_described))
        raise ConfigDataError(f"the stored {cl.__name__} is invalid: {details}") from error


_JSON_SCALARS = (str, int, float, bool, type(None))


def json_problem(value: Any, path: str) -> str | None:
    """Where ``value`` stops being JSON data (what ``json.dumps`` takes without ``default``), or None."""
    if isinstance(value, _JSON_SCALARS):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, _JSON_SCALARS):
                return f"{path} has a key of type {type(key).__qualname__} ({key!r:.60})"
            found = json_problem(item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = json_problem(item, f"{path}[{index}]")
            if found:
                return found
        return None
    return f"{path} is a {type(value).__module__}.{type(value).__qualname__} ({_short(value)})"


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = "unprintable"
    return text if len(text) <= 60 else text[:57] + "..."


class UnstableDataError(TypeError):
    """Data given to :func:`stable_hash` that is not JSON, so it has no stable text to hash."""


def stable_hash(data: Any, length: int = 12) -> str:
    """A short hash of JSON data that does not change between runs, processes or machines.

    Anything but JSON data is refused: the text of other objects (``str()`` of an
    object shows its address) differs from one process to the next, and so would every
    key and folder name made from it.
    """
    problem = json_problem(data, "data")
    if problem:
        raise UnstableDataError(
            f"cannot make a stable key: {problem}, which is not JSON data; a backend config field of this type "
            "needs hooks in the converter (the aitune_extend_converter plugin hook)"
        )
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]
