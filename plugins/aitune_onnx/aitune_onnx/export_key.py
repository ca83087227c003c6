"""The key of an export: everything that decides the bytes of the exported ONNX model.

Exports are shared between candidates and between runs (:mod:`aitune_onnx.export_cache`),
so two exports may only share a key when they would write the same model. The weights
alone do not decide that: the same weights run through edited code, a convolution with
another stride, a different ``scale`` attribute, a submodule in training mode or a flag
argument baked in as a constant all export differently. The key therefore covers:

* the weights (``aitune_core``'s weights fingerprint: names, dtypes, shapes, bytes);
* the module's make-up: each submodule's class, the source file that defines it, its
  attributes that are not weights (sizes, strides, flags) and its training flag;
* the example call (the first recorded sample, which holds the baked-in constants),
  the graph spec (shapes, dynamic axes and their ranges), the export config, the
  device, the file name (external data is found by it) and what the caller adds;
* the versions of torch, onnx, onnxscript, onnx-ir and this plugin.

Anything it cannot describe stably (an attribute whose text shows its address) makes
the key differ between processes: the safe direction, a new export instead of a wrong one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_core.plugin_api import (
    GraphSpec,
    Locator,
    Sample,
    build_identity,
    map_leaves,
    stable_hash,
    tensor_bytes,
    weights_fingerprint,
)
from aitune_onnx.export import ExportConfig

KEY_FORMAT = 1
"""Bumped when what the cache stores, or how it is keyed, changes."""

_TOOLS = ("torch", "onnx", "onnxscript", "onnx-ir", "aitune-onnx")

# nn.Module's own bookkeeping: weights and submodules are covered elsewhere, hooks do not change the export.
_MODULE_INTERNALS = frozenset({"training", "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"})


def export_key(
    module: torch.nn.Module,
    graph_spec: GraphSpec,
    samples: Sequence[Sample],
    config: ExportConfig,
    device: torch.device,
    file_name: str,
    variant: str = "",
) -> str:
    """The cache key of exporting ``graph_spec`` of ``module`` with ``config`` to ``file_name``.

    variant: what the caller changes about the export beyond these (TensorRT's export dtype).
    """
    rest = {
        "format": KEY_FORMAT,
        "make_up": module_make_up(module),
        "example": _digest_arguments(samples[0].arguments) if samples else "",
        "config": attrs.asdict(config),
        "device": str(device),
        "file": file_name,
        "variant": variant,
        "versions": tool_versions(),
    }
    return build_identity(weights_fingerprint(module), graph_spec, f"onnx-export:{stable_hash(rest, length=64)}")


def module_make_up(module: torch.nn.Module) -> str:
    """sha256 of each submodule's name, class, defining source, attributes and training flag."""
    digest = hashlib.sha256()
    for name, submodule in module.named_modules(remove_duplicate=False):
        cls = type(submodule)
        digest.update(
            f"{name}|{cls.__module__}.{cls.__qualname__}|{_source_digest(cls)}|{submodule.training}|".encode()
        )
        for attribute, value in sorted(vars(submodule).items()):
            if attribute in _MODULE_INTERNALS or "hook" in attribute:
                continue
            digest.update(f"{attribute}=".encode())
            _describe(value, digest)
    return digest.hexdigest()


def tool_versions() -> dict[str, str]:
    versions = {}
    for tool in _TOOLS:
        try:
            versions[tool] = importlib.metadata.version(tool)
        except importlib.metadata.PackageNotFoundError:
            versions[tool] = ""
    versions["torch"] = torch.__version__  # the running build (+cpu, +cu124), not just the installed name
    return versions


def _source_digest(defined: Any) -> str:
    """sha256 of the file that defines a class or function; "" for those without a Python source file."""
    try:
        source = inspect.getsourcefile(defined)
    except TypeError:
        return ""
    if not source:
        return ""
    try:
        stat = os.stat(source)
    except OSError:
        return ""
    return _file_digest(source, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _file_digest(path: str, _mtime_ns: int, _size: int) -> str:
    """sha256 of a source file, read once per process while it stays unchanged (mtime and size)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _describe(value: Any, digest: Any, depth: int = 0) -> None:
    """Feed a stable description of an attribute's value to ``digest``: tensors by their bytes,
    containers item by item, other values by their text."""
    if isinstance(value, torch.Tensor):
        digest.update(f"tensor|{value.dtype}|{tuple(value.shape)}|".encode())
        digest.update(tensor_bytes(value))
    elif isinstance(value, (list, tuple)) and depth < 8:
        digest.update(f"{type(value).__name__}[{len(value)}](".encode())
        for item in value:
            _describe(item, digest, depth + 1)
        digest.update(b")")
    elif isinstance(value, dict) and depth < 8:
        digest.update(f"dict[{len(value)}](".encode())
        for key, item in value.items():
            digest.update(f"{key!r}:".encode())
            _describe(item, digest, depth + 1)
        digest.update(b")")
    elif isinstance(value, torch.nn.Module):
        digest.update(f"module {type(value).__qualname__}".encode())  # kept outside _modules; its weights may not count
        digest.update(weights_fingerprint(value).encode())
    elif inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.isclass(value):
        # Their text shows an address; their name and source say what they do.
        name = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}"
        digest.update(f"callable {name}|{_source_digest(value)}|".encode())
    else:
        digest.update(f"{type(value).__qualname__}:{value!r}|".encode())


def _digest_arguments(arguments: dict[str, Any]) -> str:
    digest = hashlib.sha256()

    def visit(locator: Locator, leaf: Any) -> Any:
        digest.update(f"{locator.display_path}=".encode())
        _describe(leaf, digest)
        return leaf

    for name, value in arguments.items():
        map_leaves(value, Locator(name), visit)
    return digest.hexdigest()
