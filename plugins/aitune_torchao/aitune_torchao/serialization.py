"""Writing and reading quantized weights without unpickling code.

The quantized state dict is written with ``torch.save``. Its quantized weights are
torchao tensor subclasses (``Int8Tensor``, ``Float8Tensor``, ...) and the small enums
and dataclasses they carry (granularities, quantization kwargs), so a plain
``torch.load(weights_only=True)`` refuses them until they are allow-listed. torchao
allow-lists most of its classes itself when imported (``add_safe_globals``); any
other global the file names is allowed only when it is a tensor subclass, enum,
dataclass or named tuple defined inside ``torchao``, for the duration of this one
load. Anything else (a function, a class from another package) makes the load fail
with the names listed, before a byte is unpickled.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import os
import uuid
from pathlib import Path
from typing import Any

import torch

WEIGHTS_FILE = "torchao-weights.pt"

_TRUSTED_PREFIX = "torchao."


def save_state(module: torch.nn.Module, path: Path) -> Path:
    """Write ``module``'s (quantized) state dict to ``path``, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    try:
        torch.save(module.state_dict(), staging)
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    return path


def load_state(path: Path, map_location: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """Read a state dict written by :func:`save_state` with ``weights_only=True``."""
    import torchao  # noqa: F401  (registers torchao's tensor subclasses as safe globals)

    from aitune_core.plugin_api import CheckpointError

    allowed = _allowed_globals(path)
    try:
        with torch.serialization.safe_globals(allowed):
            state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:
        raise CheckpointError(
            f"refusing to load {path.name}: it is not plain (quantized) tensor data ({error})"
        ) from error
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise CheckpointError(f"{path.name} does not hold a state dict of tensors")
    return state


def _allowed_globals(path: Path) -> list[Any]:
    """The globals ``path`` names beyond those already allowed, if each is a torchao data type."""
    from aitune_core.plugin_api import CheckpointError

    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception as error:
        raise CheckpointError(f"cannot read {path.name} as a torch.save file ({error})") from error
    allowed, refused = [], []
    for name in names:
        found = _torchao_data_type(name)
        if found is None:
            refused.append(name)
        else:
            allowed.append(found)
    if refused:
        raise CheckpointError(
            f"refusing to load {path.name}: it names {', '.join(sorted(refused))}, which are not torchao tensor "
            "subclasses or data types"
        )
    return allowed


def _torchao_data_type(name: str) -> type | None:
    """The class ``name`` refers to, when it is a torchao tensor subclass, enum, dataclass or named tuple."""
    if not name.startswith(_TRUSTED_PREFIX):
        return None
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute, None)
        break
    else:
        return None
    if not isinstance(found, type) or not found.__module__.startswith(_TRUSTED_PREFIX):
        return None
    is_named_tuple = issubclass(found, tuple) and hasattr(found, "_fields")
    if issubclass(found, (torch.Tensor, enum.Enum)) or dataclasses.is_dataclass(found) or is_named_tuple:
        return found
    return None


def is_quantized(tensor: Any) -> bool:
    """Whether a parameter holds a torchao tensor subclass."""
    return isinstance(tensor, torch.Tensor) and type(tensor).__module__.startswith(_TRUSTED_PREFIX)
