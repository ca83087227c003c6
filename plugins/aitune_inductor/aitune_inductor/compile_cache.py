"""Inductor's compile cache for one JIT backend: captured at build, stored as an artifact, loaded at deploy.

A JIT checkpoint compiles again where it is loaded, which costs seconds to minutes
before the first call. ``torch.compiler.save_cache_artifacts`` serialises what the
process's compiles put into Inductor's caches (FX graphs with their compiled kernels,
AOTAutograd entries, dynamic-shape profiles, autotuning results), and
``torch.compiler.load_cache_artifacts`` puts it into another process's caches, where
the same compile then finds every piece and generates nothing.

What is captured: ``save_cache_artifacts`` returns everything recorded in the process
since it started (each call appends to one growing buffer), so after a tune that
compiled several candidates it would hold all of them, and the user's own compiles.
The build's compile and warm-up therefore run under a fresh recorder
(``CacheArtifactManager.with_fresh_cache``, torch's own scope for this, which puts the
process's recorder back afterwards), and what is saved is exactly what the winner's
build compiled or found in the cache. Compiles after the build (a shape first seen in
profiling) are not in it; the loaded backend compiles those as it would without a cache.

The bytes are pickled Python objects and compiled kernels, which run when loaded: they
are native code. The backend declares them as an optional native artifact, so a load
without ``trust_native_code=True`` never reads them and compiles again instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_core.plugin_api import get_logger
from aitune_inductor.sealed import read_sealed, write_sealed

COMPILE_CACHE_ARTIFACT = "compile_cache"
COMPILE_CACHE_FILE = "inductor-compile-cache.bin"


class CompileCacheError(RuntimeError):
    """A stored compile cache that does not hold the bytes its backend recorded."""


@attrs.define
class Captured:
    """What a build's compiles recorded: the serialised bytes (None when nothing was) and their summary."""

    data: bytes | None = None
    summary: dict[str, int] = attrs.field(factory=dict)


def _manager() -> Any:
    """torch's recorder of cache artifacts, or None for a torch without one (before 2.7)."""
    try:
        # Imported here: a private module, which an older or newer torch may not have.
        from torch.compiler._cache import CacheArtifactManager
    except ImportError:
        return None
    return CacheArtifactManager if hasattr(CacheArtifactManager, "with_fresh_cache") else None


def available() -> bool:
    """Whether this torch can capture and load compile caches."""
    return hasattr(torch.compiler, "save_cache_artifacts") and _manager() is not None


@contextlib.contextmanager
def capture() -> Iterator[Captured]:
    """Record the compiles run inside, and only those; the result is filled in when the block ends."""
    captured = Captured()
    manager = _manager()
    if manager is None or not available():
        yield captured
        return
    with manager.with_fresh_cache():
        yield captured
        saved = torch.compiler.save_cache_artifacts()
    if saved is not None:
        captured.data, info = saved
        captured.summary = _summary(info)


def _summary(info: Any) -> dict[str, int]:
    """How many artifacts of each kind (``inductor``, ``aot_autograd``, ``pgo``, ...) a cache holds."""
    artifacts = getattr(info, "artifacts", None)
    if not isinstance(artifacts, dict):
        return {}
    return {str(kind): len(keys) for kind, keys in artifacts.items() if keys}


def write(data: bytes, folder: Path) -> tuple[Path, str]:
    """Write ``data`` into ``folder``; returns the file and its sha256."""
    path = folder / COMPILE_CACHE_FILE
    return path, write_sealed(data, path)


def load(path: Path, sha256: str, what: str) -> dict[str, int]:
    """Put the cache at ``path`` into this process's Inductor caches; returns what it held.

    The file is read once and its bytes are checked against ``sha256`` (recorded in the
    checkpoint's manifest with the backend), so what is loaded is exactly what was
    hashed, whatever happens to the file meanwhile. Raises CompileCacheError otherwise.
    """
    data = read_sealed(path, sha256, f"{what}: its compile cache", CompileCacheError)
    if not available():
        get_logger().warning("this torch cannot load compile caches; compiling again", backend=what)
        return {}
    info = torch.compiler.load_cache_artifacts(data)
    return _summary(info) if info is not None else {}
