"""The module, graph and backend a checkpoint error concerns.

Both saving and loading need it, so it sits below both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aitune_core.backends.restore import StoredStateError
from aitune_core.checkpoint.manifest import CheckpointError


@contextlib.contextmanager
def about(module: str, graph: str = "", backend: str = "") -> Iterator[None]:
    """Turn any error inside into a CheckpointError that says which module, graph and backend it concerns."""
    try:
        yield
    except (CheckpointError, StoredStateError) as error:
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
