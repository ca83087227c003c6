"""The cattrs converter that turns aitune state into JSON-ready data and back.

Everything aitune persists (backend configs, graph specs, checkpoint manifests) goes
through this converter; nothing is pickled. Plugins teach it their own types through
the ``aitune_extend_converter`` hook.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cattrs
import torch

_DTYPES = {str(dtype): dtype for dtype in vars(torch).values() if isinstance(dtype, torch.dtype)}


def dtype_from_str(name: str) -> torch.dtype:
    try:
        return _DTYPES[name if name.startswith("torch.") else f"torch.{name}"]
    except KeyError:
        raise ValueError(f"unknown torch dtype {name!r}") from None


def make_converter() -> cattrs.Converter:
    converter = cattrs.Converter()
    converter.register_unstructure_hook(torch.dtype, str)
    converter.register_structure_hook(torch.dtype, lambda value, _: dtype_from_str(value))
    converter.register_unstructure_hook(torch.device, str)
    converter.register_structure_hook(torch.device, lambda value, _: torch.device(value))
    converter.register_unstructure_hook(Path, str)
    converter.register_structure_hook(Path, lambda value, _: Path(value))
    return converter


_converter: cattrs.Converter | None = None


def converter() -> cattrs.Converter:
    """The process-wide converter, extended by installed plugins on first use."""
    global _converter
    if _converter is None:
        built = make_converter()
        from aitune_core.plugins.manager import extend_converter

        extend_converter(built)
        _converter = built
    return _converter


def stable_hash(data: Any, length: int = 12) -> str:
    """A short hash of JSON-ready data that does not change between runs or machines."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]
