"""Whether a built backend can be written to a checkpoint, checked when its candidate passes.

``save`` writes each winner's ``to_dict()`` as JSON. A config field of a type the
converter does not know, a tensor in ``_extra_state`` or an artifact that is not a file
would otherwise surface only there, after the whole tuning run, as a bare TypeError.
Checked when the candidate passes, such a backend fails as a candidate instead (stage
``serialize``), with the field and the fix named, and tuning goes on with the others.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs

from aitune_core.backends.base import UNSAFE_FIELD, Backend
from aitune_core.serialization import json_problem, structure_config

CONVERTER_HOOK = "aitune_extend_converter"


class NotPersistableError(ValueError):
    """A backend's ``to_dict()`` could not be written to a checkpoint and read back as it is."""


def check_persistable(backend: Backend) -> dict[str, Any]:
    """``backend.to_dict()``, once it is known to survive JSON; NotPersistableError naming the field otherwise."""
    name = type(backend).__qualname__
    data = backend.to_dict()
    check_config(backend, data.get("config", {}))
    problem = json_problem(data.get("extra", {}), "_extra_state()")
    if problem:
        raise NotPersistableError(
            f"{name}.{problem}, which is not JSON data; return only dicts, lists, strings, numbers, booleans and "
            "None there (write tensors and other binary state to a file under context.cache_dir and list it in "
            "_artifacts())"
        )
    check_artifacts(name, data.get("artifacts", {}))
    return data


def check_config(backend: Backend, stored: Any) -> None:
    """The config as stored is JSON and structures back to an equal config."""
    cls = type(backend)
    config = backend.config
    problem = json_problem(stored, "config")
    if problem:
        raise NotPersistableError(
            f"{cls.__qualname__}: {problem}, which is not JSON data: the converter does not know this type; "
            f"teach it with the {CONVERTER_HOOK} hook (register_unstructure_hook and register_structure_hook)"
        )
    back = json.loads(json.dumps(stored))
    try:
        restored = structure_config(back, cls.config_class)
    except Exception as error:
        raise NotPersistableError(
            f"{cls.__qualname__}: the stored config does not read back ({error}); make each field's type one the "
            f"converter structures, or teach it with the {CONVERTER_HOOK} hook"
        ) from error
    expected = attrs.evolve(config, **{UNSAFE_FIELD: False}) if hasattr(config, UNSAFE_FIELD) else config
    differing = [
        field.name
        for field in attrs.fields(type(config))
        if not _same(getattr(restored, field.name), getattr(expected, field.name))
    ]
    if differing:
        shown = ", ".join(
            f"{field} ({getattr(expected, field)!r:.60} comes back as {getattr(restored, field)!r:.60})"
            for field in differing
        )
        raise NotPersistableError(
            f"{cls.__qualname__}: config field(s) {shown} change through JSON; store them in a type the converter "
            f"round-trips, or teach it the field's type with the {CONVERTER_HOOK} hook"
        )


def _same(first: Any, second: Any) -> bool:
    if isinstance(first, float) and isinstance(second, float) and math.isnan(first) and math.isnan(second):
        return True
    try:
        return bool(first == second)
    except Exception:
        return False


def check_artifacts(name: str, artifacts: Any) -> None:
    """Every declared artifact is a name mapped to an existing file."""
    if not isinstance(artifacts, dict):
        raise NotPersistableError(
            f"{name}._artifacts() must return a dict of name -> Path, got {type(artifacts).__name__}"
        )
    for key, path in artifacts.items():
        if not isinstance(key, str) or not key:
            raise NotPersistableError(f"{name}._artifacts() has a key {key!r}; artifact names are non-empty strings")
        if not isinstance(path, (str, Path)):
            raise NotPersistableError(
                f"{name}._artifacts()[{key!r}] is a {type(path).__name__}; give the Path of the file"
            )
        if not Path(path).is_file():
            raise NotPersistableError(
                f"{name}._artifacts()[{key!r}] is {path}, which is not a file; write it under context.cache_dir "
                "during the build and keep it there"
            )
