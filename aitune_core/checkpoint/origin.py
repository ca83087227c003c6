"""Where things come from: the plugin behind a backend, and the module, graph and backend an error concerns.

Both saving and loading need them, so they sit below both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aitune_core._version import __version__
from aitune_core.checkpoint.manifest import CheckpointError
from aitune_core.extensions import slots


def backend_origin(name: str) -> tuple[str, str]:
    """The distribution (and its version) whose plugin registered backend ``name``."""
    return slots().backend_origin(name) or ("aitune-core", __version__)


@contextlib.contextmanager
def about(module: str, graph: str = "", backend: str = "") -> Iterator[None]:
    """Turn any error inside into a CheckpointError that says which module, graph and backend it concerns."""
    try:
        yield
    except CheckpointError as error:
        raise CheckpointError(f"{_where(module, graph, backend)}: {error}") from error
    except Exception as error:
        raise CheckpointError(f"{_where(module, graph, backend)}: {type(error).__name__}: {error}") from error


def _where(module: str, graph: str, backend: str) -> str:
    parts = [f"module `{module}`"]
    if graph:
        parts.append(f"graph `{graph}`")
    if backend:
        parts.append(f"backend `{backend}`")
    return ", ".join(parts)
